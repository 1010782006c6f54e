"""mkdocs.yml's ``validation:`` settings make ``mkdocs build --strict`` (``make docs``, part of
``make test``) fail on a link to a missing page or to a heading a page does not have: checked on a
two-page site built with the project's settings (the built-in theme, for speed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def build(tmp_path: Path, link: str) -> subprocess.CompletedProcess:
    settings = yaml.safe_load((ROOT / "mkdocs.yml").read_text().split("\nhooks:")[0])
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "index.md").write_text(f"# Home\n\nSee [the other page]({link}).\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n\ntext\n")
    config = {
        "site_name": "t",
        "docs_dir": str(docs),
        "site_dir": str(tmp_path / "site"),
        "strict": settings["strict"],
        "validation": settings["validation"],
        "markdown_extensions": [{"toc": {"permalink": True}}],
        "nav": ["index.md", "other.md"],
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-f", str(tmp_path / "mkdocs.yml")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
    )


def test_strict_build_fails_on_a_missing_anchor_or_page_and_passes_good_links(tmp_path):
    good = build(tmp_path, "other.md#a-heading")
    assert good.returncode == 0, good.stderr
    anchor = build(tmp_path, "other.md#no-such-heading")
    assert anchor.returncode != 0 and "no-such-heading" in anchor.stderr, anchor.stderr
    page = build(tmp_path, "missing.md")
    assert page.returncode != 0 and "missing.md" in page.stderr, page.stderr
