"""Reading a secret the server keeps on disk (the model cache's MAC key, the tokens file): opened
without following links, and accepted only as a regular file of this user that nobody else can
read or write."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeSecretFile(ValueError):
    """The file cannot be opened, is not this user's regular file, or others may read or write it;
    the message says which, naming the file and never its contents."""


def read_owner_only(path: Path) -> bytes:
    """The bytes of ``path`` after the checks of the module docstring (on the opened descriptor,
    so the file checked is the file read)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UnsafeSecretFile(f"{path} cannot be opened: {exc.strerror}") from exc
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise UnsafeSecretFile(f"{path} is not a regular file of this user")
        if info.st_mode & 0o077:
            raise UnsafeSecretFile(
                f"{path} is readable or writable by others (mode {stat.S_IMODE(info.st_mode):o})"
            )
        return handle.read()
