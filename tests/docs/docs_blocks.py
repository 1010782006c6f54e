"""The shell blocks of the documentation pages and the README, and how a test runs them.

A page shows a command in a fenced ``console`` block: each command after a ``$ `` prompt (a line
ending in a backslash continues it), followed by what it prints, as a terminal shows it (stdout
and stderr together). :func:`run_console` runs each command in the page's working
directory, in order, in one `bash` per page (as a reader's terminal: `umask`, `export` and `cd`
carry on), and compares what it printed with what the page shows, allowing only for
what changes between runs:

- any number the page shows matches any number (timings, ports, sizes, timestamps), and a run of
  spaces any run of spaces (a table's columns widen with its numbers);
- a run of 12 or more hexadecimal digits matches any such run (ids, digests);
- ``...`` inside a line matches any text on that line (paths);
- a line that is only ``...`` matches any number of lines (none included).

``echo $?`` after a command prints that command's exit status, as in a terminal.

Every other shell block (``sh``, ``bash``, ``shell``, or no language) must say why it is not run,
in an HTML comment on the line before its fence, which the site does not show:
``<!-- not run: REASON -->``. A console block whose command keeps running (a server) is marked
``<!-- run: in the background until "TEXT" -->``: it starts, its output is compared up to its
first line containing TEXT, the page's later blocks run against it, and it is stopped with
SIGTERM after them (it must then exit 0). A block marked ``<!-- run: numbers exact -->`` compares
its numbers too (a privacy statement's figures).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import matplotlib

ROOT = Path(__file__).resolve().parents[2]

SHELL_LANGUAGES = {"", "sh", "bash", "shell", "console"}
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.MULTILINE | re.DOTALL
)
MARK = re.compile(r"<!--\s*(?P<kind>not run|run):\s*(?P<text>.*?)\s*-->")
BACKGROUND = re.compile(r'in the background until "(?P<until>[^"]+)"')
NUMBER = r"\d+(?:[.,]\d+)*"
HEX = r"[0-9a-f]{12,}"
TOKEN = re.compile(rf"(\.\.\.|\b{HEX}\b|{NUMBER})")
SPACES = re.compile(r"( +)")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository's root
    line: int  # the fence's line, 1-based
    language: str
    body: str
    mark: str  # "", "not run" or "run"
    mark_text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_shell(self) -> bool:
        return self.language in SHELL_LANGUAGES


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page`` (a path relative to the root), in order, with the marker
    comment on the line before its fence, if any."""
    text = (ROOT / page).read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.fullmatch(before.strip())
        language = match.group("info").strip().split(" ")[0].lstrip("{").lstrip(".")
        body = "\n".join(
            line[len(match.group("indent")) :] for line in match.group("body").rstrip("\n").split("\n")
        )
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                language=language,
                body=body,
                mark=mark.group("kind") if mark else "",
                mark_text=mark.group("text") if mark else "",
            )
        )
    return found


def pages() -> list[str]:
    """The site's pages and the top-level Markdown files."""
    listed = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return listed + sorted(p.name for p in ROOT.glob("*.md"))


@dataclass(frozen=True)
class Step:
    command: str
    shown: str  # the lines the page shows after the command


def steps(block: Block) -> list[Step]:
    """A console block's commands (``$ `` prompts, backslash continuations) and shown output."""
    found: list[Step] = []
    command: list[str] = []
    shown: list[str] = []
    continued = False
    for line in block.body.split("\n"):
        if continued:
            command.append(line)
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            if command:
                found.append(Step("\n".join(command), "\n".join(shown)))
            command, shown = [line[2:]], []
            continued = line.endswith("\\")
        elif command:
            shown.append(line)
        else:
            raise AssertionError(f"{block.where}: a console block starts with a `$ ` command: {line!r}")
    if command:
        found.append(Step("\n".join(command), "\n".join(shown)))
    return found


def pattern(shown: str, exact_numbers: bool = False) -> re.Pattern[str]:
    """What a command may print for the page to show ``shown`` (the module's rules; with
    ``exact_numbers``, a number matches only itself)."""
    parts = []
    for line in shown.rstrip().split("\n") if shown.strip() else []:
        line = line.rstrip()
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        for token in TOKEN.split(line):
            if token == "...":
                parts.append(r"[^\n]*")
            elif re.fullmatch(HEX, token):
                parts.append(HEX)
            elif token and re.fullmatch(NUMBER, token) and not exact_numbers:
                parts.append(NUMBER)
            else:  # a run of spaces matches any run (a table's column widths follow its numbers)
                parts += [" +" if p.startswith(" ") else re.escape(p) for p in SPACES.split(token)]
        parts.append(r"\n")
    return re.compile("".join(parts), re.DOTALL)


def normalised(printed: str) -> str:
    lines = [line.rstrip() for line in printed.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "".join(line + "\n" for line in lines)


def agrees(shown: str, printed: str, exact_numbers: bool = False) -> bool:
    return pattern(shown, exact_numbers).fullmatch(normalised(printed)) is not None


class Shell:
    """A reader's terminal for one page: one ``bash`` process that runs the page's commands in
    order (so ``umask``, ``export`` and ``cd`` carry on, and ``echo $?`` is the last command's
    status), in a working directory and an environment; ``substitutions`` are the only changes a
    test makes to a command (a free port for the page's default one)."""

    MARK = "--petlab-docs-command-done--"

    def __init__(
        self,
        cwd: Path,
        env: dict[str, str],
        substitutions: dict[str, str] | None = None,
        timeout: float = 300,
    ) -> None:
        self.cwd, self.env, self.timeout = cwd, env, timeout
        self.substitutions = substitutions or {}
        self.process: subprocess.Popen[bytes] | None = None

    def command(self, text: str) -> str:
        for old, new in self.substitutions.items():
            text = text.replace(old, new)
        return text

    def _bash(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            self.process = subprocess.Popen(
                ["bash", "--norc", "--noprofile"],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self.process

    def execute(self, command: str) -> tuple[str, int]:
        """What ``command`` printed (stdout and stderr, as a terminal interleaves them) and its
        exit status; its stdin is /dev/null."""
        bash = self._bash()
        assert bash.stdin is not None and bash.stdout is not None
        # the status is printed after the output, then restored for the next command's `$?`
        bash.stdin.write(
            f"{{ {command}\n}} </dev/null\n__status=$?; printf '\\n{self.MARK} %d\\n' $__status; "
            "(exit $__status)\n".encode()
        )
        bash.stdin.flush()
        received = b""
        deadline = time.monotonic() + self.timeout
        with selectors.DefaultSelector() as selector:
            selector.register(bash.stdout, selectors.EVENT_READ)
            while (self.MARK.encode() + b" ") not in received or not received.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"`{command}` did not finish within {self.timeout:.0f} s")
                if selector.select(timeout=left):
                    chunk = os.read(bash.stdout.fileno(), 65536)
                    assert chunk, (
                        f"the shell ended while running `{command}`:\n{received.decode(errors='replace')}"
                    )
                    received += chunk
        text = received.decode(errors="replace")
        printed, _, status = text.rpartition(f"\n{self.MARK} ")
        return printed, int(status)

    def close(self) -> None:
        if self.process is not None:
            if self.process.stdin is not None:
                self.process.stdin.close()
            if self.process.stdout is not None:
                self.process.stdout.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            self.process = None

    def run(self, step: Step, where: str, must_succeed: bool, exact_numbers: bool = False) -> None:
        """Run ``step`` and compare; ``must_succeed``: the page shows no ``echo $?`` after it, so
        it must exit 0."""
        printed, status = self.execute(self.command(step.command))
        assert agrees(step.shown, printed, exact_numbers), (
            f"{where}: `{step.command}` printed\n{printed}\nwhere the page shows\n{step.shown}"
        )
        assert status == 0 or not must_succeed, (
            f"{where}: `{step.command}` exited {status} (the page shows no `echo $?` after it)"
        )

    @contextmanager
    def background(self, step: Step, until: str, where: str, start_seconds: float = 180) -> Iterator[None]:
        """Start ``step``'s command, wait for a line containing ``until``, compare what it printed
        up to that line, yield, then stop it with SIGTERM; it must exit 0."""
        log = self.cwd / f"background-{abs(hash(where))}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", "exec " + self.command(step.command)],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + start_seconds
            while True:
                printed = log.read_text(errors="replace")
                if until in printed:
                    head = printed[: printed.index(until)]
                    end = printed.find("\n", len(head))
                    printed = printed if end < 0 else printed[: end + 1]
                    break
                assert process.poll() is None, f"{where}: exited {process.returncode}:\n{printed[-3000:]}"
                assert time.monotonic() < deadline, f"{where}: no {until!r} within {start_seconds} s"
                time.sleep(0.2)
            assert agrees(step.shown, printed), (
                f"{where}: `{step.command}` printed\n{printed}\nwhere the page shows\n{step.shown}"
            )
            yield
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                status = process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=40)
                raise AssertionError(f"{where}: did not stop within 40 s of SIGTERM") from None
        assert status == 0, (
            f"{where}: exited {status} after SIGTERM:\n{log.read_text(errors='replace')[-3000:]}"
        )


def environment(bin_dir: Path, home: Path, **extra: str) -> dict[str, str]:
    """The environment a reader's shell has after ``source .venv/bin/activate``: the venv's
    programs first on PATH, no PETLAB_* variable but the test's own, a home of the test's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETLAB_")}
    env.update(
        PATH=str(bin_dir) + os.pathsep + os.environ.get("PATH", ""),
        HOME=str(home),
        # matplotlib's font cache as it is (a fresh home would rebuild it, and log that it did)
        MPLCONFIGDIR=os.environ.get("MPLCONFIGDIR") or matplotlib.get_cachedir(),
        PYTHONUNBUFFERED="1",
        COLUMNS="100",
    )
    env.update(extra)
    return env


def run_console(blocks_: list[Block], shell: Shell, before: Callable[[Step], None] | None = None) -> int:
    """Run the console blocks of one page in order (module docstring); the number of commands run.
    ``before(step)`` is called before each step (a test's preparation, never a change to it)."""
    ran = 0
    with ExitStack() as background:
        background.callback(shell.close)
        for block in blocks_:
            if block.language != "console" or block.mark == "not run":
                continue
            block_steps = steps(block)
            exact = block.mark == "run" and block.mark_text == "numbers exact"
            until = BACKGROUND.fullmatch(block.mark_text) if block.mark == "run" else None
            if block.mark == "run" and not exact:
                assert until, f"{block.where}: unknown marker {block.mark_text!r}"
                assert len(block_steps) == 1, f"{block.where}: a background block holds one command"
                background.enter_context(shell.background(block_steps[0], until.group("until"), block.where))
                ran += 1
                continue
            for step, after in zip(block_steps, [*block_steps[1:], None], strict=True):
                if before is not None:
                    before(step)
                must_succeed = after is None or after.command != "echo $?"
                shell.run(step, block.where, must_succeed, exact)
                ran += 1
    return ran
