"""The Getting-started page's quickstart, run exactly as the page shows it.

The commands are read from the page's fenced code blocks (never copied here): the server block,
then the client's `classify` blocks, each followed on the page by what it prints. The only
substitution is the port: the server command runs as written with ``PETLAB_PORT`` set to a free
port (the flag's documented environment variable, so another server on 50051 cannot interfere),
and ``127.0.0.1:50051`` in the client commands becomes that port. Everything else (data directory,
key cache) lands in a temporary directory.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
DEFAULT_ADDRESS = "127.0.0.1:50051"
START_SECONDS = 120
CALL_SECONDS = 240
STOP_SECONDS = 30

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block, in page order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(markdown)]


def command_lines(block: str) -> list[str]:
    """A shell block's commands: one per line (a trailing backslash continues it), no comments."""
    joined = block.replace("\\\n", " ")
    lines = (line.split("  #")[0].strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def quickstart(markdown: str) -> tuple[list[str], list[tuple[list[str], str | None]]]:
    """The server command, and each client command with the class the page says it prints."""
    blocks = code_blocks(markdown)
    server: list[str] | None = None
    clients: list[tuple[list[str], str | None]] = []
    for index, (language, text) in enumerate(blocks):
        if language != "sh":
            continue
        for line in command_lines(text):
            argv = shlex.split(line)
            if argv[:2] == ["petlab-server", "serve"] and server is None:
                server = argv
            elif argv[:2] == ["petlab-client", "classify"]:
                shown = blocks[index + 1] if index + 1 < len(blocks) else ("", "")
                printed = shown[1].strip().splitlines()[-1] if shown[0] == "text" else None
                clients.append((argv, printed))
    assert server is not None, "the page shows no `petlab-server serve` command"
    assert clients, "the page shows no `petlab-client classify` command"
    return server, clients


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_page_shows_the_two_terminal_quickstart() -> None:
    server, clients = quickstart(PAGE.read_text())
    assert server == ["petlab-server", "serve", "--model", "iris"]
    first, printed = clients[0]
    assert first[first.index("--server") + 1] == DEFAULT_ADDRESS
    assert printed == "setosa"


@pytest.mark.slow
def test_quickstart_commands_as_written_classify_against_a_real_server(tmp_path: Path) -> None:
    server_argv, clients = quickstart(PAGE.read_text())
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PETLAB_PORT": str(port),
        "PETLAB_CLIENT_CACHE": str(tmp_path / "client-cache"),
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(server_argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_SECONDS
        while f"127.0.0.1:{port}" not in log.read_text(errors="replace"):
            assert server.poll() is None, log.read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "the server did not start listening in time"
            time.sleep(0.2)
        assert (tmp_path / "petlab-data").is_dir()  # the data directory the page names
        for argv, printed in clients:
            argv = [a.replace(DEFAULT_ADDRESS, f"127.0.0.1:{port}") for a in argv]
            done = subprocess.run(
                argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=CALL_SECONDS
            )
            assert done.returncode == 0, done.stderr[-2000:]
            assert done.stdout.strip().splitlines()[-1] == printed
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            status = server.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=STOP_SECONDS)
            pytest.fail(f"the server did not stop within {STOP_SECONDS} s of SIGTERM")
    assert status == 0, log.read_text(errors="replace")[-2000:]
