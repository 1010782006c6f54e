"""Every command the site and the README show is run as written, or says why not.

The pages' ``console`` blocks are run by :func:`docs_blocks.run_console` (its docstring has the
rules: ``$ `` prompts, the output compared allowing for numbers and ``...``), one test per page in
:data:`RUN_PAGES`, each page in a fresh directory as a reader's shell after
``source .venv/bin/activate``. Every other shell block carries ``<!-- not run: REASON -->``, and
each page's not-run blocks are reported as one skipped test with their count and reasons, so none
is skipped silently. The top-level files (README.md, CONTRIBUTING.md, ...) show commands a run page
also shows, or ``make`` targets.
"""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

import docs_blocks
import pytest
from docs_blocks import ROOT, Block, Shell, Step, agrees, blocks, environment, pages, run_console, steps

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class RunPage:
    """How a page's console blocks run: files its reader has made already (copied from the
    repository into the working directory), and whether it encrypts for real (``slow``)."""

    files: dict[str, str] = field(default_factory=dict)
    slow: bool = False
    server_port: bool = False  # the page's 127.0.0.1:50051 is a free port (PETLAB_PORT)
    #: before the command: (directory made by an earlier command, a copy of it to make), so a
    #: command finds what an earlier one compiled (the time of a compile saved, nothing changed)
    reuse: dict[str, tuple[str, str]] = field(default_factory=dict)


RUN_PAGES: dict[str, RunPage] = {
    "docs/getting-started.md": RunPage(
        slow=True,
        server_port=True,
        # the demo's server finds the Iris model the page's server compiled (same settings)
        reuse={"petlab-experiments demo": ("petlab-data/models", ".petlab-cache/demo-server/models")},
    ),
    "docs/reference/exit-statuses.md": RunPage(),
    "docs/how-to/analyst.md": RunPage(files={"analyses.json": "client/examples/analyses.json"}),
    "docs/how-to/data-owner.md": RunPage(),
    "docs/how-to/synthesizers.md": RunPage(),
    "docs/explanation/privacy-accounting.md": RunPage(),
}

#: Pages whose shell blocks are not run, as a whole, with the reason.
NOT_RUN_PAGES = {
    "docs/explanation/knn-speed.md": "benchmark recipes that write results/: minutes to hours each",
}

#: Top-level files: their commands are checked against the run pages' (not run themselves).
TOP_LEVEL = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "SECURITY.md")


def shell_blocks() -> dict[str, list[Block]]:
    return {page: [b for b in blocks(page) if b.is_shell] for page in pages()}


def one_line(command: str) -> str:
    """A command with its continuations joined and its spacing and comment dropped."""
    command = command.replace("\\\n", " ").split("  #")[0]
    return " ".join(shlex.split(command, comments=True))


def shown_commands(block: Block) -> list[str]:
    if block.language == "console":
        return [one_line(step.command) for step in steps(block)]
    joined = block.body.replace("\\\n", " ")
    return [
        one_line(line) for line in joined.split("\n") if line.strip() and not line.lstrip().startswith("#")
    ]


def test_every_shell_block_is_run_or_says_why_not():
    unmarked, unrun_console = [], []
    counted = {"run": 0, "not run": 0}
    for page, found in shell_blocks().items():
        if page in TOP_LEVEL:
            continue
        for block in found:
            if block.mark == "not run" or page in NOT_RUN_PAGES:
                assert block.mark_text or page in NOT_RUN_PAGES, f"{block.where}: a reason after `not run:`"
                counted["not run"] += 1
            elif block.language != "console":
                unmarked.append(block.where)
            elif page not in RUN_PAGES:
                unrun_console.append(block.where)
            else:
                counted["run"] += 1
    assert not unmarked, f"shell blocks neither console nor marked <!-- not run: REASON -->: {unmarked}"
    assert not unrun_console, f"console blocks on pages no test runs (add them to RUN_PAGES): {unrun_console}"
    assert counted["run"] >= 10, counted


def test_top_level_files_show_commands_a_run_page_runs():
    """The README's commands are the Getting-started page's (run below) or make targets."""
    run: set[str] = set()
    for page in RUN_PAGES:
        for block in blocks(page):
            if block.language == "console" and block.mark != "not run":
                run.update(shown_commands(block))
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))

    def sets_up(command: str) -> bool:  # make targets, and activating the venv they make
        parts = [part.split() for part in command.split("&&")]
        return all(
            (p[:1] == ["make"] and set(p[1:]) <= targets) or p == ["source", ".venv/bin/activate"]
            for p in parts
        )

    strays = []
    for name in TOP_LEVEL:
        for block in shell_blocks()[name]:
            if block.mark == "not run":
                continue
            strays += [
                f"{block.where}: {c}" for c in shown_commands(block) if c not in run and not sets_up(c)
            ]
    assert not strays, f"commands shown but run by no test (show them on a run page too): {strays}"


def _not_run_pages() -> list[str]:
    return [
        page
        for page, found in shell_blocks().items()
        if page not in TOP_LEVEL and any(b.mark == "not run" or page in NOT_RUN_PAGES for b in found)
    ]


@pytest.mark.parametrize("page", _not_run_pages())
def test_blocks_not_run(page):
    """One skip per page, listing its blocks not run and why (``pytest -rs`` shows them)."""
    found = [b for b in shell_blocks()[page] if b.mark == "not run" or page in NOT_RUN_PAGES]
    reasons = sorted({b.mark_text or NOT_RUN_PAGES[page] for b in found})
    pytest.skip(f"{page}: {len(found)} shell block(s) not run: " + "; ".join(reasons))


def _prepare(page: str, tmp_path: Path) -> Shell:
    setting = RUN_PAGES[page]
    work = tmp_path / "work"
    work.mkdir()
    for name, source in setting.files.items():
        shutil.copy(ROOT / source, work / name)
    extra: dict[str, str] = {}
    substitutions: dict[str, str] = {}
    if setting.server_port:
        port = free_port()
        extra["PETLAB_PORT"] = str(port)
        substitutions["127.0.0.1:50051"] = f"127.0.0.1:{port}"
    (tmp_path / "home").mkdir()
    return Shell(work, environment(BIN, tmp_path / "home", **extra), substitutions)


def _marks(page: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.slow] if RUN_PAGES[page].slow else []


@pytest.mark.parametrize("page", [pytest.param(p, marks=_marks(p)) for p in RUN_PAGES])
def test_the_page_commands_print_what_the_page_shows(page, tmp_path):
    shell = _prepare(page, tmp_path)

    def before(step: Step) -> None:
        if step.command in RUN_PAGES[page].reuse:
            made, copy = RUN_PAGES[page].reuse[step.command]
            (shell.cwd / copy).parent.mkdir(mode=0o700, parents=True)
            shutil.copytree(shell.cwd / made, shell.cwd / copy)

    ran = run_console(blocks(page), shell, before)
    assert ran > 0, f"{page}: no console command run"


def test_the_comparison_allows_numbers_and_ellipses_only():
    shown = "model iris ready (compiled in 7.1 s)\n...\nlistening on 127.0.0.1:50051 ...\nsetosa"
    assert agrees(shown, "model iris ready (compiled in 12.25 s)\nlistening on 127.0.0.1:39121 (x)\nsetosa\n")
    assert agrees(shown, "model iris ready (compiled in 3 s)\na\nb\nlistening on 127.0.0.1:1 (y)\nsetosa")
    assert not agrees(
        shown, "model iris ready (compiled in 7.1 s)\nlistening on 127.0.0.1:50051 x\nversicolor"
    )
    assert not agrees(shown, "model wine ready (compiled in 7.1 s)\nlistening on 127.0.0.1:50051 x\nsetosa")
    assert not agrees("setosa", "setosa\nvirginica")
    assert agrees("", "") and not agrees("", "Traceback")


def test_console_steps_and_markers(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not run: needs a scheduler -->\n```sh\ndask scheduler\n```\n\n"
        "```console\n$ petlab-client classify --server 127.0.0.1:50051 \\\n    --model iris\nsetosa\n"
        "$ echo $?\n0\n```\n"
    )
    monkeypatch.setattr(docs_blocks, "ROOT", tmp_path)
    sh, console = blocks("page.md")
    assert (sh.mark, sh.mark_text, sh.language, sh.line) == ("not run", "needs a scheduler", "sh", 2)
    assert console.mark == "" and [s.shown for s in steps(console)] == ["setosa", "0"]
    assert steps(console)[0].command == "petlab-client classify --server 127.0.0.1:50051 \\\n    --model iris"
    shell = Shell(tmp_path, environment(BIN, tmp_path))
    assert run_console(blocks("page.md")[:0], shell) == 0
    page.write_text("```console\n$ sh -c 'echo oops >&2; exit 3'\noops\n$ echo $?\n3\n$ true\n```\n")
    assert run_console(blocks("page.md"), shell) == 3
    page.write_text("```console\n$ sh -c 'exit 3'\n```\n")  # no `echo $?` after it: must succeed
    with pytest.raises(AssertionError, match="exited 3"):
        run_console(blocks("page.md"), shell)
