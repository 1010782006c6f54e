"""Preparing a client's evaluation keys before its first query.

concrete-python 2.11 decompresses and prepares a compressed ``fhe.EvaluationKeys`` object inside
the first ``server.run`` that uses it (about 5 s measured on this machine; later runs with the same
object do not pay it), and offers no call that prepares keys without a run. The server holds no
secret key, so it cannot encrypt a query of its own. The client therefore sends one encrypted query
(of any levels) with its keys (``KeyChunk.warmup_query``); the server evaluates it once, at
registration, and discards the result, which reveals nothing to anyone. The ciphertext is kept
owner-only next to the key store (``<data_dir>/warmup/<key_id>.ct``) so that, at server start, the
most recently used stored keys are loaded and prepared before the port opens.

The directory must be this user's and writable by nobody else (checked also when it exists). Each
file is written through ``petlab.owner_only.write_owner_only``: a fresh staging file of
unpredictable name, opened ``O_CREAT | O_EXCL | O_NOFOLLOW`` mode 0600, then renamed; so a link
planted under any name is never followed, and a crash leaves at most a staging file, removed at the
next start. Files are read back only as this user's regular, owner-only files.
"""

from __future__ import annotations

import logging
from pathlib import Path

from concrete import fhe

from petlab.crypto.knn.deployment import parse_ciphertext, run_encrypted
from petlab.owner_only import private_directory, read_owner_only, write_owner_only

log = logging.getLogger(__name__)


class WarmupStore:
    """Owner-only files holding one warm-up ciphertext per registered key id."""

    def __init__(self, directory: Path):
        self.directory = private_directory(Path(directory), "to keep warm-up queries there")

    def path(self, key_id: str) -> Path:
        if not key_id or not all(c.isalnum() or c in "-_" for c in key_id):
            raise ValueError("malformed key id")
        return self.directory / f"{key_id}.ct"

    def put(self, key_id: str, ciphertext: bytes) -> None:
        write_owner_only(self.path(key_id), ciphertext)

    def get(self, key_id: str) -> bytes | None:
        try:
            return read_owner_only(self.path(key_id))
        except (OSError, ValueError):  # missing, malformed id, or not our owner-only regular file
            return None

    def keep_only(self, key_ids: set[str]) -> None:
        """Delete the warm-up files of keys the key store no longer holds (expired, evicted), and
        staging files a crash left behind."""
        for path in self.directory.glob(".*.tmp"):
            path.unlink(missing_ok=True)
        for path in self.directory.glob("*.ct"):
            if path.stem not in key_ids:
                path.unlink(missing_ok=True)


def prepare_keys(server: fhe.Server, evaluation_keys: fhe.EvaluationKeys, ciphertext: bytes) -> None:
    """Run the circuit once on ``ciphertext`` with ``evaluation_keys`` and drop the result;
    ``ValueError`` when the ciphertext does not fit the circuit or these keys."""
    run_encrypted(server, evaluation_keys, parse_ciphertext(ciphertext))
