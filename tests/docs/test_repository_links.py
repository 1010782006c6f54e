"""The links of the repository's top-level Markdown files (README.md, CONTRIBUTING.md, CHANGELOG.md,
SECURITY.md) lead somewhere: every relative link names a file or directory of the repository, and
a ``#fragment`` into a Markdown file names one of its headings (as GitHub makes anchors). The site's
own pages are checked by ``mkdocs build --strict`` (``validation:`` in mkdocs.yml, anchors included).
No network: links to other sites are not followed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "SECURITY.md"]
LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def prose(markdown: str) -> str:
    """``markdown`` without fenced blocks and code spans (their brackets are not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def targets(markdown: str) -> list[str]:
    text = prose(markdown)
    return LINK.findall(text) + IMAGE.findall(text) + REFERENCE.findall(text)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings (GitHub numbers repeated ones -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        anchor = github_anchor(heading)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def broken(source: Path) -> list[str]:
    """The relative links of ``source`` that lead nowhere, each with the reason."""
    problems = []
    for target in targets(source.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:, ...
            continue
        path, _, fragment = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        if not resolved.exists():
            problems.append(f"{target}: no such file")
            continue
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
            continue
        if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved.read_text()):
            problems.append(f"{target}: {resolved.relative_to(ROOT)} has no heading #{fragment}")
    return problems


@pytest.mark.parametrize("name", FILES)
def test_relative_links_lead_to_files_and_headings(name):
    source = ROOT / name
    assert source.is_file(), name
    assert targets(source.read_text()) or name != "README.md", "README.md links to nothing"
    assert not broken(source), f"{name}: {broken(source)}"


def test_the_check_finds_what_is_broken(tmp_path, monkeypatch):
    """A missing file, a missing heading and a link out of the tree are found; good links,
    code, other sites and a heading's GitHub anchor pass."""
    root = tmp_path / "repository"
    monkeypatch.setattr(sys.modules[__name__], "ROOT", root)
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "page.md").write_text("# A page\n\n## The `--n` flag: what it costs\n")
    (tmp_path / "outside.md").write_text("# Outside\n")
    source = root / "README.md"
    source.write_text(
        "[ok](docs/page.md) [ok](docs/page.md#the---n-flag-what-it-costs) [web](https://x.org/a)\n"
        "`[not a link](nowhere.md)` [self](#top)\n\n# Top\n\n"
        "[gone](docs/missing.md) [no heading](docs/page.md#costs) [out](../outside.md)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert broken(source) == [
        "docs/missing.md: no such file",
        "docs/page.md#costs: docs/page.md has no heading #costs",
        "../outside.md: outside the repository",
    ]
