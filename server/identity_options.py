"""How a data owner names callers and bounds what each may hold, from the command line (issue 15).

* ``--tokens FILE``: bearer tokens, lines ``owner-name token`` (owner-only file; see
  :mod:`petlab.server.identities`). Every k-NN call must then carry a valid token.
* With ``--tls-client-ca`` (mutual TLS) and no tokens, the client certificate names the owner.
* ``--owner-cap-mb``, ``--owner-max-keys``: what one identified owner may store (bytes of keys plus
  its uploads in flight; number of key sets). ``--owner-upload-slots``,
  ``--owner-evaluation-slots``: its concurrent uploads and classifications.

Without tokens or client certificates callers are anonymous and only the store-wide limits apply.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from petlab.server.identities import CallerIdentities, load_tokens
from petlab.server.key_store import OwnerQuota


def add_identity_arguments(serve: argparse.ArgumentParser, env: Callable[[str, object], object]) -> None:
    serve.add_argument(
        "--tokens",
        type=Path,
        default=env("TOKENS_FILE", None),
        help="[PETLAB_TOKENS_FILE] bearer tokens, lines 'owner-name token', file mode 600: every k-NN "
        "call must carry 'authorization: Bearer <token>'; keys and quotas are per owner",
    )
    serve.add_argument(
        "--owner-cap-mb",
        type=float,
        default=float(str(env("OWNER_CAP_MB", 1024))),
        help="[PETLAB_OWNER_CAP_MB] per identified owner: stored keys plus uploads in flight "
        "(at most --key-cap-mb)",
    )
    serve.add_argument(
        "--owner-max-keys",
        type=int,
        default=int(str(env("OWNER_MAX_KEYS", 4))),
        help="[PETLAB_OWNER_MAX_KEYS] per identified owner: stored key sets (its oldest make room)",
    )
    serve.add_argument(
        "--owner-upload-slots",
        type=int,
        default=int(str(env("OWNER_UPLOAD_SLOTS", 1))),
        help="[PETLAB_OWNER_UPLOAD_SLOTS] per identified owner: concurrent key uploads",
    )
    serve.add_argument(
        "--owner-evaluation-slots",
        type=int,
        default=int(str(env("OWNER_EVALUATION_SLOTS", 1))),
        help="[PETLAB_OWNER_EVALUATION_SLOTS] per identified owner: concurrent classifications",
    )


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
