"""Code, tests and pages say what holds, not how the project got there.

History (tracker numbers, who found what, which work session measured what) belongs in git commit
messages and CHANGELOG.md. This test reads every text file of the package (its rooms behind
``petlab/``), the tests, the documentation, the results the pages include and the top-level guides,
and fails on a line that matches one of :data:`HISTORY`, unless the line is in :data:`ALLOWED`
(a legitimate use of the word, such as an analyst's controller session).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Where history must not appear: the package's rooms (``petlab/<room>`` links to them), the tests,
#: the documentation with the results and guides it includes, and the tools that build it.
SCANNED_DIRS = (
    "petlab",
    "server",
    "client",
    "crypto",
    "plaindata",
    "experiments",
    "protos",
    "tests",
    "docs",
    "tools",
)
SCANNED_FILES = ("README.md", "CONTRIBUTING.md", "SECURITY.md", "mkdocs.yml", "Makefile", "pyproject.toml")
SUFFIXES = {".py", ".pyi", ".md", ".proto", ".capnp", ".yml", ".yaml", ".toml", ".json", ".cfg", ".txt"}
SKIPPED_PARTS = {"__pycache__", ".venv", "site", ".pytest_cache", ".ruff_cache"}
SCRATCH = re.compile(r"all-|links-quick$")  # the harness's uncommitted runs under results/ (.gitignore)

#: Words that tell history, searched in every line in lower case.
HISTORY = {
    "a tracker issue": r"(?<![a-z])issues?[ _-]?#?\d+|\bpre-issue\b|\bthe issue\b",
    "a review round": r"\bred[ -]team\b|\bred-\d+\b|\blast round\b",
    "a work session": (
        r"\bsession \d+\b|\bsessions? before\b|\b(?:first|second|third|fourth|fifth|sixth|previous|last|"
        r"earlier|later|next) session\b|\brerun of\b"
    ),
    "who shared the machine": r"\b(?:another|other) engineers?'?s?\b|\blead engineer\b",
}

#: (file, text on the line): uses of those words that are not history.
ALLOWED: tuple[tuple[str, str], ...] = ()

#: Files still to be rewritten: skipped here, and each must still match (remove it once it passes).
PENDING: tuple[str, ...] = ()

PATTERNS = {name: re.compile(pattern) for name, pattern in HISTORY.items()}
#: Every match of :data:`HISTORY` holds one of these: lines without any are not searched.
KEYWORDS = ("issue", "red team", "red-", "round", "session", "rerun", "engineer")


def scanned_files() -> list[Path]:
    files: dict[Path, Path] = {}
    roots = [ROOT / name for name in SCANNED_DIRS] + [ROOT / "results"]
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and not SKIPPED_PARTS.intersection(path.parts):
                if root.name == "results" and (path.suffix != ".md" or SCRATCH.match(path.parts[-2])):
                    continue
                files.setdefault(path.resolve(), path)
    for name in SCANNED_FILES:
        files.setdefault((ROOT / name).resolve(), ROOT / name)
    return sorted(files.values())


def relative(path: Path) -> str:
    real = path.resolve()
    return (real.relative_to(ROOT) if real.is_relative_to(ROOT) else path.relative_to(ROOT)).as_posix()


def pending(name: str) -> bool:
    return any(name == entry or name.startswith(entry + "/") for entry in PENDING)


def history_lines(name: str, text: str) -> list[str]:
    """Every line of ``text`` that tells history, with the kind of history, as ``file:line: ...``."""
    found: list[str] = []
    if not any(keyword in text.lower() for keyword in KEYWORDS):
        return found
    for number, line in enumerate(text.splitlines(), 1):
        lower = line.lower()
        if not any(keyword in lower for keyword in KEYWORDS):
            continue
        if any(name == allowed_file and phrase in line for allowed_file, phrase in ALLOWED):
            continue
        for kind, pattern in PATTERNS.items():
            if pattern.search(lower):
                found.append(f"{name}:{number}: {kind}: {line.strip()}")
    return found


def test_no_history_in_code_tests_or_pages() -> None:
    found = []
    for path in scanned_files():
        name = relative(path)
        if not pending(name) and path.resolve() != Path(__file__).resolve():  # its own examples
            found += history_lines(name, path.read_text(encoding="utf-8", errors="replace"))
    assert not found, "history belongs in git and CHANGELOG.md; say what holds instead:\n" + "\n".join(found)


def test_every_pending_file_still_needs_its_rewrite() -> None:
    """A pending entry that no longer matches must leave the list, so the scan covers it again."""
    done = []
    for entry in PENDING:
        paths = [ROOT / entry] if (ROOT / entry).is_file() else sorted((ROOT / entry).rglob("*"))
        texts = [p.read_text(encoding="utf-8", errors="replace") for p in paths if p.suffix in SUFFIXES]
        if not any(history_lines(entry, text) for text in texts):
            done.append(entry)
    assert not done, f"no history left in {done}: remove them from PENDING"


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("the audit before issue 22, one floating-point SVD", "a tracker issue"),
        ("(issues 15 and 23)", "a tracker issue"),
        ("def test_before_issue_24_the_edge_discloses(statement):", "a tracker issue"),
        ("Issue 34's latency targets", "a tracker issue"),
        ("at the issue's scale", "a tracker issue"),
        ("found by the red team: a LocalCluster connection", "a review round"),
        ("### Security (red-24: figures computed from confidential data)", "a review round"),
        ("## Rerun of 2026-11-27 (fourth session)", "a work session"),
        ("the session before found 1.4 s", "a work session"),
        ("in the last round", "a review round"),
        ("another engineer's tests loaded the machine", "who shared the machine"),
    ],
)
def test_the_patterns_catch_history(line: str, kind: str) -> None:
    assert history_lines("x.py", line) == [f"x.py:1: {kind}: {line}"]


@pytest.mark.parametrize(
    "line",
    [
        "run opens a session and reveals one trace at a time",
        "one open session per person; a new one closes the old",
        "compiled once per test session",
        "Please report a vulnerability privately, not in a public issue",
        "certificate(common_name, issuer_key=None, issuer=None)",
        "rebuild the report from the CSV of an earlier run",
    ],
)
def test_the_patterns_leave_ordinary_words(line: str) -> None:
    assert history_lines("x.py", line) == []
