"""Figures computed from the confidential data that no privacy statement covers.

A pass rate, a count of suppressed pairs, the number of rejected draws or the prior mass computed
from the true number of origins are each a release of the confidential data with no accounting
behind it: they are never printed. With ``--diagnostics FILE`` they go to a JSON file,
written owner-only (0600, created fresh) and marked confidential, for the data owner's own use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

BANNER = "CONFIDENTIAL: computed from the confidential input and not covered by any privacy statement"


def write_diagnostics(path: Path, figures: dict) -> None:
    """Write ``figures`` (JSON-ready) to ``path``, owner-only, with the confidentiality banner."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump({"confidential": True, "notice": BANNER, **figures}, handle, indent=2, default=float)
        handle.write("\n")
