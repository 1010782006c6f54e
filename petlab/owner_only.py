"""Files and directories only their owner may touch: the device's secret keys, the server's model
cache and its MAC key, tokens, controller ids, confidential diagnostics. One place for the checks
every room needs.

* :func:`private_directory` creates a directory tree mode 0700 and refuses one that exists but is
  not a real directory (a symbolic link), is owned by another user, or is group- or world-writable
  (where another user could swap files).
* :func:`write_owner_only` stages the bytes in a fresh ``mkstemp`` file (``O_CREAT | O_EXCL``, mode
  0600, a random name in the target's directory), so another local user cannot pre-create or
  symlink the staging file to read the secret as it is written; then it fsyncs and renames.
* :func:`read_owner_only` opens without following links and accepts only a regular file of this
  user that nobody else can read or write (checked on the opened descriptor).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from petlab.errors import BadInput


class UnsafeDirectory(BadInput, ValueError):
    """A directory meant for secrets is not a real directory, is owned by another user or is
    writable by others."""


class UnsafeSecretFile(BadInput, ValueError):
    """The file cannot be opened, is not this user's regular file, or others may read or write it;
    the message says which, naming the file and never its contents."""


def private_directory(
    path: Path, use: str = "to keep keys there", error: type[UnsafeDirectory] = UnsafeDirectory
) -> Path:
    """``path`` (created with its missing parents, mode 0700), after checking that it is a real
    directory owned by this user and writable by nobody else; ``error`` (saying "refusing ``use``")
    otherwise."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise error(f"{path} is not a directory (a symbolic link?); refusing {use}")
    if info.st_uid != os.getuid():
        raise error(
            f"{path} belongs to user id {info.st_uid}, not to this one ({os.getuid()}); refusing {use}"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise error(
            f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):o}); refusing {use}: "
            "chmod 700 it or choose another directory"
        )
    return path


def write_owner_only(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, mode 0600 (module docstring)."""
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


def read_owner_only(path: Path) -> bytes:
    """The bytes of ``path`` after the checks of the module docstring."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UnsafeSecretFile(f"{path}: {exc.strerror}") from exc
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise UnsafeSecretFile(f"{path} is not a regular file of this user")
        if info.st_mode & 0o077:
            raise UnsafeSecretFile(
                f"{path} is readable or writable by others (mode {stat.S_IMODE(info.st_mode):o})"
            )
        return handle.read()
