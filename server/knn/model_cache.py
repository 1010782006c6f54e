"""On-disk cache of compiled encrypted k-NN circuits of every family (thermo, fast, paper; whole or
split over partitions), so a second start does not recompile.

The cache directory is the caller's: ``petlab-server`` uses ``<data-dir>/models``; callers that give
none (``petlab-experiments local-demo``, library use) get ``$PETLAB_CACHE_DIR``, else
``~/.cache/petlab/models``.
Each entry lives in ``<cache_dir>/<key>/`` where the key is :meth:`petlab.crypto.knn.model.KnnModel.cache_key`
(the kept training points and labels, k, bits, the family and its public distance, the circuit
configuration, concrete-python's version, the circuit format, and for a split model the number of
partitions: its artifact is a module of stages, ``crypto.knn.split``). It holds ``server.zip``
(concrete's server artifact) and ``meta.json`` (the circuit's statistics, the compile time, the
model's public description, the artifact's SHA-256 and an HMAC-SHA256 over the entry,
``server.knn.cache_integrity``). Both are written in a ``.staging-*`` directory that is renamed
into place, so a crash never leaves a half entry; staging directories older than an hour are
removed at the next start. Servers may share one cache: each entry's load-or-compile runs under an
advisory lock on ``<cache_dir>/.<key>.lock`` (``filelock``), so a second server waits for the
first one's compilation and loads its artifact instead of compiling the same circuit again, and no
reader ever opens an entry another process is replacing. The wait is bounded
(:data:`ENTRY_LOCK_SECONDS`): past it the model is compiled without touching the entry.
The server only loads artifacts it wrote: the cache directory must be
this user's and writable by nobody else (created 0700, refused otherwise), and an entry whose MAC
under the directory's owner-only key or whose digest does not verify (truncated, edited, swapped,
planted) is discarded with a warning and recompiled before concrete ever opens it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from concrete import fhe
from filelock import FileLock, Timeout

from petlab.crypto.knn.config import CircuitConfig, circuit_statistics
from petlab.crypto.knn.deployment import load_server, save_server
from petlab.crypto.knn.families import compile_plan, split_program
from petlab.crypto.knn.model import KnnModel
from petlab.crypto.knn.split.program import StageGraph, compile_program, module_statistics
from petlab.server.knn.cache_integrity import EntryMac, private_cache_directory

log = logging.getLogger(__name__)


@dataclass
class CompiledModel:
    model: KnnModel
    server: fhe.Server
    statistics: dict
    compile_seconds: float  # of the compilation that produced the artifact
    from_cache: bool
    graph: StageGraph | None = None  # a split model's stage graph (None: one whole circuit)


def default_cache_dir() -> Path:
    return Path(os.environ.get("PETLAB_CACHE_DIR", Path.home() / ".cache" / "petlab" / "models"))


def load_or_compile(
    model: KnnModel, config: CircuitConfig, cache_dir: Path | None = None, parts: int = 1
) -> CompiledModel:
    """The compiled circuit of ``model``: from ``cache_dir`` when a verified entry is there, else
    compiled and stored. With ``parts`` > 1, the split module over that many partitions of the
    training set (``crypto.knn.split``; ``ValueError`` if the family cannot be split).
    ``cache_integrity.UnsafeCache`` (a ``ValueError``) for a cache directory or key that others
    could write."""
    program = split_program(model.plan, parts, config) if parts > 1 else None
    graph = program.graph if program is not None else None
    cache_dir = private_cache_directory(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    remove_stale_staging(cache_dir)
    mac = EntryMac.for_directory(cache_dir)
    key = model.cache_key(config, parts)
    entry = cache_dir / key
    with entry_lock(cache_dir / f".{key}.lock") as locked:
        cached = _load_entry(entry, mac) if locked else None
        if cached is not None:
            server, meta = cached
            return CompiledModel(model, server, meta["statistics"], meta["compile_seconds"], True, graph)
        if not locked:
            log.warning(
                "cache entry %s stayed locked for %.0f s: compiling without it", key, ENTRY_LOCK_SECONDS
            )
        log.info(
            "compiling model %s (n=%d, d=%d%s): not in the cache %s yet; this once takes from seconds to "
            "minutes, later starts load it from the cache",
            model.name,
            model.plan.n,
            model.d,
            f", {parts} partitions" if program else "",
            cache_dir,
        )
        started = time.perf_counter()
        if program is not None:
            compiled = compile_program(program, config)
            statistics = module_statistics(compiled, [stage.name for stage in program.stages])
        else:
            compiled = compile_plan(model.plan, config)
            statistics = circuit_statistics(compiled)
        seconds = time.perf_counter() - started
        if not locked:
            return CompiledModel(model, compiled.server, statistics, seconds, False, graph)
        _write_entry(
            entry,
            compiled,
            {"statistics": statistics, "compile_seconds": seconds, "model": model.public_info()},
            mac,
        )
        server = _load_entry(entry, mac)
    if server is None:
        raise RuntimeError(f"compiled artifact in {entry} could not be read back")
    return CompiledModel(model, server[0], statistics, seconds, False, graph)


# a compilation of the largest shipped model takes minutes on 2 cores; a wait past this bound
# means a stuck holder: compile alone rather than wait for ever
ENTRY_LOCK_SECONDS = 1800.0
ENTRY_LOCK_POLL_SECONDS = 0.1


@contextlib.contextmanager
def entry_lock(path: Path, timeout: float | None = None) -> Iterator[bool]:
    """Hold an exclusive advisory lock on ``path`` (``filelock.FileLock``: ``flock`` on a file
    created 0600) for the block; yields whether it was taken within ``timeout`` seconds (default
    :data:`ENTRY_LOCK_SECONDS`). A process that dies releases its lock with its file descriptors,
    so a crash never leaves the entry locked."""
    limit = ENTRY_LOCK_SECONDS if timeout is None else timeout
    lock = FileLock(path, mode=0o600)
    try:
        lock.acquire(timeout=limit, poll_interval=ENTRY_LOCK_POLL_SECONDS)
        locked = True
    except Timeout:
        locked = False
    try:
        yield locked
    finally:
        if locked:
            lock.release()


STALE_STAGING_SECONDS = 3600.0


def remove_stale_staging(cache_dir: Path, now: float | None = None) -> list[Path]:
    """Remove staging directories a killed process left behind. One is written only while an
    artifact is saved (seconds), so one older than an hour belongs to no running server (another
    server sharing the cache may be saving a younger one right now: it is left alone)."""
    cutoff = (time.time() if now is None else now) - STALE_STAGING_SECONDS
    stale = [p for p in cache_dir.glob(".staging-*") if p.is_dir() and p.lstat().st_mtime < cutoff]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_entry(entry: Path, mac: EntryMac) -> tuple[fhe.Server, dict] | None:
    meta_path, artifact = entry / "meta.json", entry / "server.zip"
    if not (meta_path.is_file() and artifact.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict) or not mac.verify(entry.name, artifact, meta):
            raise ValueError("its MAC does not verify (not written by this server, or altered since)")
        if meta.get("sha256") != _digest(artifact):
            raise ValueError("artifact digest mismatch")
        return load_server(artifact), meta
    except Exception as exc:  # a damaged entry is rebuilt, never trusted
        log.warning("discarding damaged cache entry %s: %s", entry, exc)
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _write_entry(entry: Path, circuit: fhe.Circuit | fhe.Module, meta: dict, mac: EntryMac) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=entry.parent))
    try:
        save_server(circuit, staging / "server.zip")
        meta = {**meta, "sha256": _digest(staging / "server.zip")}
        meta["mac"] = mac.sign(entry.name, staging / "server.zip", meta)
        (staging / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(staging, entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
