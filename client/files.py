"""Writing the client's secrets: owner-only (0600), atomic, and only inside directories that nobody
else can write to.

* :func:`write_owner_only` stages the bytes in a fresh ``mkstemp`` file (``O_CREAT | O_EXCL``, mode
  0600, a random name in the target's directory), so another local user cannot pre-create or
  symlink the staging file to read the secret as it is written; then it fsyncs and renames.
* :func:`private_directory` creates a directory tree mode 0700 and refuses one that exists but is
  owned by someone else or is group- or world-writable (where another user could swap files).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


class UnsafeDirectory(ValueError):
    """A directory meant for secrets is owned by another user or writable by others."""


def private_directory(path: Path) -> Path:
    """``path`` (created with its missing parents, mode 0700), after checking that it is a real
    directory owned by this user and writable by nobody else."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory (a symbolic link?); refusing to keep keys there")
    if info.st_uid != os.getuid():
        raise UnsafeDirectory(f"{path} belongs to another user; refusing to keep keys there")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeDirectory(
            f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):o}); "
            "refusing to keep keys there: chmod 700 it or choose another directory"
        )
    return path


def write_owner_only(path: Path, data: bytes) -> None:
    path = Path(path)
    descriptor, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        raise
