"""Who is calling the k-NN service: the owner that keys, uploads and quotas are counted against.

* Bearer tokens (``--tokens FILE``): lines ``owner-name token``; blank lines and ``#`` comments are
  skipped. The file must be a regular file of this user that nobody else can read or write
  (0600 or stricter), since it holds every caller's secret. A caller sends
  ``authorization: Bearer <token>`` metadata; a call with a missing or wrong token ends with
  UNAUTHENTICATED and a message that names no token and no owner. Only SHA-256 digests of the
  tokens are kept in memory after loading.
* Mutual TLS (``--tls-client-ca``): without tokens, the verified client certificate's identity
  (its subject alternative name, else its common name, as gRPC reports it) names the owner.
* Neither: callers are anonymous; the owner recorded with a key is the caller's address, for the
  log only, and no per-owner limits apply (the key store is one shared pool, as before).

What one identified owner may hold is its :class:`OwnerQuota` (:func:`owner_quota`); the k-NN key
store and admission count against it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path

import grpc

from petlab.errors import BadInput
from petlab.owner_only import UnsafeSecretFile, read_owner_only
from petlab.server.common.rpc_errors import Unauthenticated

OWNER_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
TOKEN_PATTERN = re.compile(r"[\x21-\x7e]{16,512}")  # printable ASCII without spaces, 16+ characters
_BEARER = "bearer "


class TokensFileError(BadInput, ValueError):
    """The tokens file is unsafe or malformed (the message never quotes a token)."""


def load_tokens(path: Path) -> dict[str, str]:
    """SHA-256 of each token (hex) -> owner name, from an owner-only tokens file."""
    path = Path(path)
    try:
        lines = read_owner_only(path).decode("utf-8").splitlines()
    except UnsafeSecretFile as exc:
        raise TokensFileError(f"the tokens file {exc}; chmod 600 it and keep it yours") from exc
    except UnicodeDecodeError as exc:
        raise TokensFileError(f"the tokens file {path} is not UTF-8 text") from exc
    tokens: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if (
            len(fields) != 2
            or not OWNER_PATTERN.fullmatch(fields[0])
            or not TOKEN_PATTERN.fullmatch(fields[1])
        ):
            raise TokensFileError(
                f"{path}, line {number}: expected 'owner-name token' (owner: letters, digits, _.@-, "
                "at most 64; token: 16 to 512 printable characters without spaces)"
            )
        digest = hashlib.sha256(fields[1].encode()).hexdigest()
        if digest in tokens:
            raise TokensFileError(f"{path}, line {number}: this token is already given to an owner")
        tokens[digest] = fields[0]
    if not tokens:
        raise TokensFileError(f"the tokens file {path} names no owner")
    return tokens


class CallerIdentities:
    """The owner of each call (see the module docstring). ``enforced``: callers are identified,
    so per-owner quotas apply and a key is usable only by its owner."""

    def __init__(self, tokens: dict[str, str] | None = None, client_certificates: bool = False):
        self._tokens = dict(tokens or {})
        self._certificates = client_certificates

    @property
    def enforced(self) -> bool:
        return bool(self._tokens) or self._certificates

    @property
    def by_token(self) -> bool:
        """Callers are named by bearer tokens (else, when enforced, by client certificates)."""
        return bool(self._tokens)

    def owner(self, context: grpc.ServicerContext) -> str:
        """The calling owner's name, or the call ends with UNAUTHENTICATED."""
        if self._tokens:
            return "token:" + self._token_owner(context)
        if self._certificates:
            identities = list(context.peer_identities() or ())
            if not identities:
                raise Unauthenticated("this server requires a client certificate")
            return "cert:" + identities[0].decode("utf-8", errors="replace")
        return context.peer() or "anonymous"

    def _token_owner(self, context: grpc.ServicerContext) -> str:
        values = [value for key, value in context.invocation_metadata() or () if key == "authorization"]
        presented = values[0] if len(values) == 1 and isinstance(values[0], str) else ""
        if presented[: len(_BEARER)].lower() == _BEARER:
            digest = hashlib.sha256(presented[len(_BEARER) :].strip().encode()).hexdigest()
            for known, owner in self._tokens.items():
                if hmac.compare_digest(known, digest):
                    return owner
        raise Unauthenticated(
            "this server requires a valid bearer token (metadata 'authorization: Bearer <token>')"
        )


@dataclass(frozen=True)
class OwnerQuota:
    """What one identified owner may hold: bytes of stored keys plus uploads in flight, and keys."""

    max_bytes: int
    max_keys: int

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.max_keys <= 0:
            raise ValueError("a per-owner quota must allow at least one key and one byte")


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
