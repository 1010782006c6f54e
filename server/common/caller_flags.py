"""How a data owner names callers and bounds what each may hold, from the command line (issue 15).

* ``--tokens FILE``: bearer tokens, lines ``owner-name token`` (owner-only file; see
  :mod:`petlab.server.common.callers`). Every k-NN call must then carry a valid token.
* With ``--tls-client-ca`` (mutual TLS) and no tokens, the client certificate names the owner.
* ``--owner-cap-mb``, ``--owner-max-keys``: what one identified owner may store (bytes of keys plus
  its uploads in flight; number of key sets). ``--owner-upload-slots``,
  ``--owner-evaluation-slots``: its concurrent uploads and classifications.

Without tokens or client certificates callers are anonymous and only the store-wide limits apply.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from petlab.server.common.callers import CallerIdentities, load_tokens
from petlab.server.common.environment import add_env_option
from petlab.server.knn.key_store import OwnerQuota


def add_identity_arguments(serve: argparse._ActionsContainer) -> None:
    add_env_option(
        serve,
        "--tokens",
        Path,
        None,
        "bearer tokens, lines 'owner-name token', file mode 600: every k-NN call must carry "
        "'authorization: Bearer <token>'; keys and quotas are per owner",
    )
    add_env_option(
        serve,
        "--owner-cap-mb",
        float,
        None,
        "per identified owner: stored keys plus uploads in flight, MiB (at most --key-cap-mb; "
        "default: --owner-max-keys key sets of the largest model)",
    )
    add_env_option(
        serve, "--owner-max-keys", int, 4, "per identified owner: stored key sets (its oldest make room)"
    )
    add_env_option(serve, "--owner-upload-slots", int, 1, "per identified owner: concurrent key uploads")
    add_env_option(
        serve, "--owner-evaluation-slots", int, 1, "per identified owner: concurrent classifications"
    )


def caller_options(args: argparse.Namespace) -> dict[str, Any]:
    """The caller-identity fields of ``server.app.ServerOptions`` (the per-owner slots go to the
    k-NN room's ``ServiceLimits``)."""
    return {
        "tokens": args.tokens,
        "owner_cap_bytes": None if args.owner_cap_mb is None else int(args.owner_cap_mb * (1 << 20)),
        "owner_max_keys": args.owner_max_keys,
    }


def caller_identities(tokens: Path | None, client_certificates: bool) -> CallerIdentities:
    """Identities from the tokens file (if any) and whether client certificates are required."""
    return CallerIdentities(load_tokens(tokens) if tokens else None, client_certificates)


def owner_quota(
    identities: CallerIdentities, owner_cap_bytes: int, owner_max_keys: int, key_cap_bytes: int
) -> OwnerQuota | None:
    """The per-owner quota when callers are identified (never above the store's cap), else None."""
    if not identities.enforced:
        return None
    return OwnerQuota(min(owner_cap_bytes, key_cap_bytes), owner_max_keys)
