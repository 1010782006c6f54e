"""Persistent store of clients' evaluation keys (public keys: they let the server compute, never
decrypt).

Layout under the data directory: ``keys/<key_id>.bin`` (one file per key, mode 0600) and
``keys/index.sqlite`` (owner, model, size, digest, created and last-used times). Uploads stream into
a temporary file that is renamed into place only once its size and SHA-256 match what the client
announced, so a crash or a truncated upload never leaves a half key behind. Keys idle for longer
than ``idle_seconds`` expire; when the total size passes ``max_bytes`` the least recently used keys
are evicted.

Denial of service. An upload must announce a size in the window the caller gives (the model's
expected key size, from its client specs, and a small margin for framing), so nobody reserves more
than a real key set. Its announced size is reserved against ``max_bytes`` for as long as it
streams (staging bytes count: concurrent uploads cannot fill the disk beyond the cap), and an
upload is refused at once when the stored keys plus the uploads in flight leave no room for it even
after evicting every stored key. Eviction happens only after the upload's bytes are complete, match
their SHA-256 and pass ``verify`` (the caller's check that they are evaluation keys for the model),
so junk announcing a huge size never pushes anyone else's keys out.

Owners. With an :class:`OwnerQuota` (the server identifies its callers by bearer token or client
certificate), owners are kept apart: each owner's stored keys, key count and bytes in flight are
held to the quota; a key is usable only by the owner who registered it (anyone else gets "unknown
key id", so key ids of other owners are not even confirmed); and a verified upload may evict only
its own owner's least recently used keys, never another owner's. When the store is full of other
owners' keys the upload is refused. Without a quota (anonymous callers) the store is one shared
pool, evicted least recently used as a whole, and a key id is the capability to use the key.

A key's last-used time (what expiry and eviction go by) moves only when the caller says the key
was used successfully (:meth:`KeyStore.mark_used`, after an evaluation), never on a mere lookup:
cheap invalid calls naming a key id do not keep it alive.

The directory must be this user's and writable by nobody else (checked at start, also when it
already exists). The store survives restarts; on start it removes temporary files and any file or
index row without its partner.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from petlab.errors import BadInput
from petlab.owner_only import private_directory
from petlab.server.common.callers import OwnerQuota

KEY_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")


class KeyStoreError(BadInput):
    """Base class; the message is meant for the person who made the request (INVALID_ARGUMENT
    unless a subclass names another status)."""


class KeyNotFound(KeyStoreError):
    grpc_status = "NOT_FOUND"


class MalformedKeyId(KeyStoreError):
    pass


class KeyForAnotherModel(KeyStoreError):
    grpc_status = "FAILED_PRECONDITION"

    def __init__(self, message: str, registered: str = ""):
        super().__init__(message)
        self.registered = registered  # the model tag the key was registered for


class KeyTooLarge(KeyStoreError):
    """The store's cap (or, :class:`OwnerQuotaExceeded`, the owner's quota) leaves no room."""

    grpc_status = "RESOURCE_EXHAUSTED"


class UploadMismatch(KeyStoreError):
    pass


class OwnerQuotaExceeded(KeyTooLarge):
    """The caller's own quota (bytes, keys or uploads in flight) leaves no room."""


@dataclass(frozen=True)
class StoreCaps:
    """How many bytes the store holds in all, and one identified owner at most."""

    store_bytes: int
    owner_bytes: int

    @classmethod
    def for_owners(cls, key_set_bytes: int, owners: int, keys_per_owner: int) -> StoreCaps:
        """Room for ``owners`` owners each holding ``keys_per_owner`` key sets of
        ``key_set_bytes`` (the largest a hosted model accepts): one owner's quota is its key sets,
        never more, so no fewer than ``owners`` owners can fill the store."""
        if min(key_set_bytes, owners, keys_per_owner) < 1:
            raise ValueError("the key store needs at least one owner, one key set and one byte")
        owner = key_set_bytes * keys_per_owner
        return cls(owner * owners, owner)


@dataclass(frozen=True)
class OwnerUsage:
    keys: int
    stored_bytes: int
    uploading_bytes: int


@dataclass(frozen=True)
class StoredKey:
    key_id: str
    owner: str
    model: str
    size: int
    created: float
    last_used: float


class KeyStore:
    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        idle_seconds: float,
        clock: Callable[[], float] = time.time,
        quota: OwnerQuota | None = None,
    ):
        if max_bytes <= 0 or idle_seconds <= 0:
            raise ValueError("key store size cap and idle time must be positive")
        if quota is not None and quota.max_bytes > max_bytes:
            raise ValueError("the per-owner quota cannot exceed the key store's cap")
        self.quota = quota
        self.directory = private_directory(Path(directory), "to keep evaluation keys there")
        self.max_bytes, self.idle_seconds, self._clock = int(max_bytes), float(idle_seconds), clock
        self._lock = threading.Lock()
        self._staging_bytes = 0  # announced sizes of the uploads in flight
        self._owner_staging: dict[str, int] = {}  # the same, per owner
        self._db = sqlite3.connect(self.directory / "index.sqlite", check_same_thread=False)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS keys (key_id TEXT PRIMARY KEY, owner TEXT NOT NULL, "
            "model TEXT NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL, "
            "created REAL NOT NULL, last_used REAL NOT NULL)"
        )
        self._db.commit()
        self._reconcile()

    # ------------------------------------------------------------------ public API

    def put(
        self,
        model: str,
        owner: str,
        total_size: int,
        sha256: str,
        chunks: Iterable[bytes],
        verify: Callable[[Path], None] | None = None,
        size_window: tuple[int, int] | None = None,
    ) -> StoredKey:
        """Stream an upload to disk; the key becomes visible only when complete and verified.

        ``size_window``: the announced size must lie within it (after the caps are checked, so an
        upload over a cap is still "too large"). ``verify(path)`` runs on the complete staging
        file before anything is evicted; it raises ``ValueError`` for bytes that are not what the
        caller expects (they are then dropped)."""
        self.check_announced(total_size, size_window, model)
        if not re.fullmatch(r"[0-9a-f]{64}", sha256 or ""):
            raise UploadMismatch("the first chunk must carry the upload's SHA-256 as 64 hex digits")
        key_id = secrets.token_hex(16)
        staging = self.directory / f".upload-{key_id}"
        digest, received = hashlib.sha256(), 0
        with self._lock:
            self._admit_locked(owner, total_size)
            self._staging_bytes += total_size
            self._owner_staging[owner] = self._owner_staging.get(owner, 0) + total_size
        try:
            with open(staging, "xb", opener=_owner_only) as handle:
                for chunk in chunks:
                    received += len(chunk)
                    if received > total_size:
                        raise UploadMismatch(f"the upload sent more than the announced {total_size} bytes")
                    digest.update(chunk)
                    handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            if received != total_size:
                raise UploadMismatch(f"the upload ended after {received} of the announced {total_size} bytes")
            if digest.hexdigest() != sha256:
                raise UploadMismatch("the uploaded bytes do not match the announced SHA-256")
            if verify is not None:
                try:
                    verify(staging)
                except ValueError as exc:
                    raise UploadMismatch(
                        f"the upload is not usable evaluation keys for {model!r}: {exc}"
                    ) from exc
            now = self._clock()
            with self._lock:
                # room for this key and the uploads still streaming (their reservations)
                self._evict_for(owner)
                os.replace(staging, self._path(key_id))
                self._db.execute(
                    "INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (key_id, owner, model, total_size, sha256, now, now),
                )
                self._db.commit()
            return StoredKey(key_id, owner, model, total_size, now, now)
        finally:
            with self._lock:
                self._staging_bytes -= total_size
                self._owner_staging[owner] -= total_size
                if not self._owner_staging[owner]:
                    del self._owner_staging[owner]
            staging.unlink(missing_ok=True)

    def check_announced(self, total_size: int, size_window: tuple[int, int] | None, model: str) -> None:
        """Whether an upload announcing ``total_size`` bytes of keys for ``model`` may start, before
        any byte of it is read: ``UploadMismatch`` for no size or one outside ``size_window``,
        ``KeyTooLarge`` / ``OwnerQuotaExceeded`` over the store's cap or the owner's quota (checked
        first, so an upload over a cap is "too large" whatever the model)."""
        if total_size <= 0:
            raise UploadMismatch("the upload must announce its total size in the first chunk")
        if total_size > self.max_bytes:
            raise KeyTooLarge(
                f"evaluation keys of {total_size} bytes exceed this server's cap of {self.max_bytes} bytes"
            )
        if self.quota is not None and total_size > self.quota.max_bytes:
            raise OwnerQuotaExceeded(
                f"evaluation keys of {total_size} bytes exceed your quota of {self.quota.max_bytes} bytes"
            )
        if size_window is not None and not size_window[0] <= total_size <= size_window[1]:
            raise UploadMismatch(
                f"evaluation keys for {model!r} are {size_window[0]} to {size_window[1]} bytes; "
                f"the upload announces {total_size}"
            )

    def read(self, key_id: str, model: str, owner: str | None = None) -> bytes:
        """The key's bytes, after checking it exists, has not expired and belongs to ``model``
        (and to ``owner``, when given)."""
        return self.locate(key_id, model, owner).read_bytes()

    def locate(self, key_id: str, model: str, owner: str | None = None) -> Path:
        """The key's file (its last-used time unchanged). ``owner``: only that owner's key is found
        (another owner's key id is answered exactly as an unknown one)."""
        if not KEY_ID_PATTERN.fullmatch(key_id or ""):
            raise MalformedKeyId("a key id is 32 lowercase hex digits, as returned by RegisterKeys")
        with self._lock:
            self._expire_locked()
            row = self._db.execute("SELECT model, owner FROM keys WHERE key_id = ?", (key_id,)).fetchone()
            if row is None or (owner is not None and row[1] != owner):
                raise KeyNotFound(f"unknown or expired key id {key_id}; upload your evaluation keys again")
            if row[0] != model:
                raise KeyForAnotherModel(
                    f"key id {key_id} was registered for model {row[0]!r}, not {model!r}", row[0]
                )
        return self._path(key_id)

    def mark_used(self, key_id: str) -> None:
        """The key served an evaluation: it is now the most recently used (a forgotten key is
        left forgotten)."""
        with self._lock:
            self._db.execute("UPDATE keys SET last_used = ? WHERE key_id = ?", (self._clock(), key_id))
            self._db.commit()

    def forget(self, key_id: str) -> None:
        with self._lock:
            self._delete_locked([key_id])

    def entries(self) -> list[StoredKey]:
        """Every stored key, oldest first (named so it does not shadow ``list`` in this class)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT key_id, owner, model, size, created, last_used FROM keys ORDER BY created"
            ).fetchall()
        return [StoredKey(*row) for row in rows]

    def usage(self, owner: str) -> OwnerUsage:
        """What ``owner`` holds now: stored keys, their bytes, and bytes of its uploads in flight."""
        with self._lock:
            count, size = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM keys WHERE owner = ?", (owner,)
            ).fetchone()
            return OwnerUsage(int(count), int(size), self._owner_staging.get(owner, 0))

    def total_bytes(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(SUM(size), 0) FROM keys").fetchone()[0])

    def expire(self) -> list[str]:
        with self._lock:
            return self._expire_locked()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ internals

    def _path(self, key_id: str) -> Path:
        return self.directory / f"{key_id}.bin"

    def _delete_locked(self, key_ids: list[str]) -> None:
        for key_id in key_ids:
            self._path(key_id).unlink(missing_ok=True)
            self._db.execute("DELETE FROM keys WHERE key_id = ?", (key_id,))
        self._db.commit()

    def _expire_locked(self) -> list[str]:
        cutoff = self._clock() - self.idle_seconds
        stale = [r[0] for r in self._db.execute("SELECT key_id FROM keys WHERE last_used < ?", (cutoff,))]
        self._delete_locked(stale)
        return stale

    def _admit_locked(self, owner: str, size: int) -> None:
        """Refuse at once an upload that cannot fit even if it is verified (nothing is reserved)."""
        if self._staging_bytes + size > self.max_bytes:
            raise KeyTooLarge(
                "the key store is busy with other uploads; retry in a minute (uploads in flight "
                "count against the store's cap)"
            )
        if self.quota is None:
            return
        if self._owner_staging.get(owner, 0) + size > self.quota.max_bytes:
            raise OwnerQuotaExceeded("your uploads in flight already use your quota; wait for them to finish")
        self._expire_locked()
        others = self._db.execute(
            "SELECT COALESCE(SUM(size), 0) FROM keys WHERE owner != ?", (owner,)
        ).fetchone()[0]
        if others + self._staging_bytes + size > self.max_bytes:
            raise KeyTooLarge("the key store is full with other callers' keys; retry later")

    def _evict_for(self, owner: str) -> None:
        """Make room for ``owner``'s verified upload (still reserved in the staging counts): least
        recently used eviction until the store's cap holds for its keys plus every upload in flight
        and, with a quota, the owner's bytes and key count hold to it. With a quota only the
        owner's own keys are candidates; if they do not free enough, nothing is evicted and the
        upload is refused."""
        self._expire_locked()
        rows = self._db.execute("SELECT key_id, owner, size FROM keys ORDER BY last_used").fetchall()
        quota = self.quota
        total = sum(size for _, _, size in rows)
        mine = [(key_id, size) for key_id, holder, size in rows if quota is None or holder == owner]
        own_bytes, own_keys = sum(size for _, size in mine), len(mine)
        own_staging = self._owner_staging.get(owner, 0)

        def fits() -> bool:
            if total + self._staging_bytes > self.max_bytes:
                return False
            return quota is None or (
                own_bytes + own_staging <= quota.max_bytes and own_keys + 1 <= quota.max_keys
            )

        victims = []
        for key_id, size in mine:
            if fits():
                break
            victims.append(key_id)
            total, own_bytes, own_keys = total - size, own_bytes - size, own_keys - 1
        if not fits():
            raise KeyTooLarge("the key store is full with other callers' keys; retry later")
        self._delete_locked(victims)

    def _reconcile(self) -> None:
        with self._lock:
            for leftover in self.directory.glob(".upload-*"):
                leftover.unlink(missing_ok=True)
            known = {r[0] for r in self._db.execute("SELECT key_id FROM keys")}
            on_disk = {p.stem for p in self.directory.glob("*.bin")}
            for orphan in on_disk - known:
                self._path(orphan).unlink(missing_ok=True)
            self._delete_locked(sorted(known - on_disk))


def _owner_only(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)
