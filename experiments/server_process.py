"""One server program started as a process on a free loopback port, for tests and experiments
(``tests/e2e/test_liveness.py``, ``tests/e2e/test_fair_shares.py``, ``petlab-experiments liveness-stress``,
``petlab-experiments server-design``).

The program is given ``--port 0 --port-file FILE --data-dir DIR`` and the caller's arguments; it is
ready once it has written its port to the file. Every wait is bounded: the start (the program may
compile a model first), the stop after SIGTERM; :meth:`ServerProcess.kill` always ends the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

SERVER = Path(sys.executable).with_name("petlab-server")
START_SECONDS = 300.0  # for a server to compile its model and write its port


class ServerProcess:
    """``command`` (``petlab-server serve`` unless given) with ``arguments``, started in ``work``
    (its log ``work/server.log``, its data ``work/data``); the constructor returns once the port is
    written (``RuntimeError`` with the log's end if the process exits or ``start_seconds`` pass)."""

    def __init__(
        self,
        work: Path,
        arguments: Sequence[str] = (),
        command: Sequence[str] = (str(SERVER), "serve"),
        start_seconds: float = START_SECONDS,
    ):
        work.mkdir(parents=True, exist_ok=True)
        port_file = work / "port"
        port_file.unlink(missing_ok=True)
        self.log = work / "server.log"
        full = [*command, "--port", "0", "--port-file", str(port_file), "--data-dir", str(work / "data")]
        with self.log.open("ab") as output:
            self.process = subprocess.Popen([*full, *arguments], stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + start_seconds
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{command[-1]} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        self.port = int(port_file.read_text().strip())
        self.address = f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def terminate(self, within: float) -> float | None:
        """SIGTERM, then the seconds until the process exited; None if it was still running
        ``within`` seconds later (it is left running: see :meth:`threads`, then :meth:`kill`)."""
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(within)
        except subprocess.TimeoutExpired:
            return None
        return time.monotonic() - began

    def threads(self) -> list[str]:
        """The process's threads now, each ``name state wchan`` from ``/proc`` (what a stuck
        process is doing; empty once it has exited)."""
        rows = []
        for task in sorted(Path(f"/proc/{self.process.pid}/task").glob("*")):
            try:
                name = (task / "comm").read_text().strip()
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                wchan = (task / "wchan").read_text().strip()
            except OSError:
                continue
            rows.append(f"{name} {state} {wchan}")
        return rows

    def stop(self, within: float = 30.0) -> float | None:
        """:meth:`terminate`, killing the process if it is still running ``within`` s later."""
        try:
            return self.terminate(within)
        finally:
            self.kill()

    def children(self) -> list[int]:
        """The process's child processes now (``/proc``; a cluster's workers, say)."""
        pids: list[int] = []
        for task in Path(f"/proc/{self.process.pid}/task").glob("*"):
            try:
                pids += [int(pid) for pid in (task / "children").read_text().split()]
            except OSError:
                continue
        return pids

    def kill(self) -> None:
        """SIGKILL the process and its children (none is left behind); returns once it is reaped."""
        if self.process.poll() is None:
            children = self.children()
            self.process.kill()
            for pid in children:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait(30)
