"""Integrity of the compiled-model cache: only this server's own, unaltered artifacts are loaded.

Loading a concrete server artifact unpacks a zip and may load a shared library from it, so a
writable cache is a way into the server process. Two checks close it:

* :func:`private_cache_directory` creates the cache directory mode 0700 and refuses one that is not
  a real directory, is owned by another user, or is group- or world-writable.
* :class:`EntryMac` holds a 32-byte key, made once from the OS's randomness and kept owner-only
  (0600) in ``mac.key`` inside the cache directory; every entry's ``meta.json`` carries an
  HMAC-SHA256 over the entry's name, the artifact's bytes and the rest of its metadata. An entry
  whose MAC does not verify (edited, swapped with another entry, written by someone else or by a
  version that did not MAC) is never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path

from petlab.owner_only import UnsafeDirectory, UnsafeSecretFile, private_directory, read_owner_only

KEY_FILE = "mac.key"
KEY_BYTES = 32
_DOMAIN = b"petlab model cache entry v1\x00"


class UnsafeCache(UnsafeDirectory):
    """The cache directory or its MAC key could be written or read by someone else."""


def private_cache_directory(path: Path) -> Path:
    """``path`` (created with missing parents, mode 0700) after checking it is a real directory of
    this user that nobody else can write to; :class:`UnsafeCache` otherwise."""
    return private_directory(path, "to load compiled models from it", UnsafeCache)


class EntryMac:
    """HMAC-SHA256 of cache entries under the cache directory's own owner-only key."""

    def __init__(self, key: bytes):
        if len(key) != KEY_BYTES:
            raise UnsafeCache(f"a model cache MAC key is {KEY_BYTES} bytes")
        self._key = key

    @classmethod
    def for_directory(cls, directory: Path) -> EntryMac:
        """The key in ``directory/mac.key``, created (0600) on first use. A key file
        that is not a regular file of this user readable by nobody else is refused."""
        path = Path(directory) / KEY_FILE
        if not os.path.lexists(path):
            _create_key(path)
        return cls(_read_key(path))

    def sign(self, entry_name: str, artifact: Path, meta: dict) -> str:
        """The MAC of an entry: its name, the artifact's bytes, and ``meta`` without ``"mac"``."""
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (_DOMAIN, entry_name.encode()):
            mac.update(len(part).to_bytes(8, "big") + part)
        mac.update(artifact.stat().st_size.to_bytes(8, "big"))
        with artifact.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                mac.update(block)
        unsigned = {name: value for name, value in meta.items() if name != "mac"}
        mac.update(json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode())
        return mac.hexdigest()

    def verify(self, entry_name: str, artifact: Path, meta: dict) -> bool:
        claimed = meta.get("mac")
        if not isinstance(claimed, str):
            return False
        return hmac.compare_digest(claimed, self.sign(entry_name, artifact, meta))


def _create_key(path: Path) -> None:
    """Write a fresh key to a private temporary file, then hard-link it into place: a concurrent
    start either wins the link or reads the winner's complete key, never a half-written one."""
    descriptor, staging = tempfile.mkstemp(dir=path.parent, prefix=".mac-key-")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(staging, path)
    finally:
        os.unlink(staging)


def _read_key(path: Path) -> bytes:
    try:
        key = read_owner_only(path)
    except UnsafeSecretFile as exc:
        raise UnsafeCache(
            f"model cache key {exc}; refusing the cache: remove the key, the cache is rebuilt"
        ) from exc
    if len(key) != KEY_BYTES:
        raise UnsafeCache(f"model cache key {path} is damaged; remove it and the cache is rebuilt")
    return key
