"""Where the device's key cache lives (what its files are and how they are written is
``client.knn_client``'s; the owner-only checks and writes are ``petlab.owner_only``'s). A module of
its own so that ``petlab-client --help`` can show the default without importing concrete."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """The device's key cache: ``$PETLAB_CLIENT_CACHE``, else ``~/.cache/petlab``."""
    return Path(os.environ.get("PETLAB_CLIENT_CACHE", Path.home() / ".cache" / "petlab"))
