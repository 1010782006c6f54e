"""Preparing a client's evaluation keys before its first query.

concrete-python 2.11 decompresses and prepares a compressed ``fhe.EvaluationKeys`` object inside
the first ``server.run`` that uses it (about 5 s measured on this machine; later runs with the same
object do not pay it), and offers no call that prepares keys without a run. The server holds no
secret key, so it cannot encrypt a query of its own. The client therefore sends one encrypted query
(of any levels) with its keys (``KeyChunk.warmup_query``); the server evaluates it once, at
registration, and discards the result, which reveals nothing to anyone. The ciphertext is kept
owner-only next to the key store (``<data_dir>/warmup/<key_id>.ct``) so that, at server start, the
most recently used stored keys are loaded and prepared before the port opens.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from concrete import fhe

from petlab.crypto.knn.deployment import parse_ciphertext, run_encrypted

log = logging.getLogger(__name__)


class WarmupStore:
    """Owner-only files holding one warm-up ciphertext per registered key id."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def path(self, key_id: str) -> Path:
        if not key_id or not all(c.isalnum() or c in "-_" for c in key_id):
            raise ValueError("malformed key id")
        return self.directory / f"{key_id}.ct"

    def put(self, key_id: str, ciphertext: bytes) -> None:
        target = self.path(key_id)
        staging = target.with_suffix(".tmp")
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(ciphertext)
        os.replace(staging, target)

    def get(self, key_id: str) -> bytes | None:
        try:
            return self.path(key_id).read_bytes()
        except (OSError, ValueError):
            return None

    def keep_only(self, key_ids: set[str]) -> None:
        """Delete the warm-up files of keys the key store no longer holds (expired, evicted)."""
        for path in self.directory.glob("*.ct"):
            if path.stem not in key_ids:
                path.unlink(missing_ok=True)


def prepare_keys(server: fhe.Server, evaluation_keys: fhe.EvaluationKeys, ciphertext: bytes) -> None:
    """Run the circuit once on ``ciphertext`` with ``evaluation_keys`` and drop the result;
    ``ValueError`` when the ciphertext does not fit the circuit or these keys."""
    run_encrypted(server, evaluation_keys, parse_ciphertext(ciphertext))
