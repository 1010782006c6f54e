"""MkDocs hook: publish the committed figures under results/ with the site.

The benchmarks page shows the PNG figures that the experiments wrote into results/ (one copy,
beside their tables); MkDocs only publishes files under docs/, so this adds them as
``results/...`` at the site's root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent


def on_files(files: Files, config: Any) -> Files:
    for figure in sorted((ROOT / "results").rglob("*.png")):
        uri = figure.relative_to(ROOT).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(figure)))
    return files
