"""The device's key cache: where it lives. The owner-only checks and writes it relies on are
``petlab.owner_only``'s."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """The device's key cache: ``$PETLAB_CLIENT_CACHE``, else ``~/.cache/petlab``."""
    return Path(os.environ.get("PETLAB_CLIENT_CACHE", Path.home() / ".cache" / "petlab"))
