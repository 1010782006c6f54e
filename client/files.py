"""Writing the client's secrets: owner-only (0600) and atomic (temporary file, then rename)."""

from __future__ import annotations

import os
from pathlib import Path


def write_owner_only(path: Path, data: bytes) -> None:
    staging = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.chmod(staging, 0o600)  # the file may have existed with wider permissions
    os.replace(staging, path)
