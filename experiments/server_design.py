"""The server's cost per idle stream and its answers beside them, for this ``petlab-server`` and,
with ``--baseline``, another build of it (an earlier version's ``petlab-server``, installed in
its own environment), measured in the same run on loopback.

Each server runs as its own process (``iris``, n = 6, k = 3, the fast family, ``--grace 1``, and
``--baseline-args`` for the baseline). Idle health ``Watch`` streams (or reflection streams) are
opened from client connections (a new connection each ``--streams-per-connection`` streams, at most
the server's 100 per connection), up to each level of ``--levels`` in turn; a stream is *held* when
its first status arrived and it is still open; it is never read again. At each level: the server's
resident memory and threads (``/proc/PID/status`` VmRSS, Threads), ``--calls`` health ``Check``
and ``ListModels`` calls, one after another on a connection of their own, each with a
``--call-timeout`` deadline (median, p99 and the number answered; after three failures in a row the
rest are counted unanswered, so a level is bounded), and the seconds of one encrypted
classification by a device (``KnnRemote``, keys made once for the run and registered with each
server). Last, with every held stream open: SIGTERM, and the seconds until the process exits
(killed after ``STOP_BOUND``).

Memory per idle stream: (RSS at the level - RSS with none) / streams held, in KiB. Latencies are the
client's (grpc.aio, in this process), so they include the client's own event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from petlab.client.knn_client import PreparedModel
from petlab.experiments.markdown import table as markdown_table
from petlab.experiments.server_process import SERVER, ServerProcess
from petlab.protos import knn_pb2, knn_pb2_grpc

MODEL_FLAGS = ["--model", "iris", "--n", "6", "--k", "3", "--algorithm", "fast", "--grace", "1"]
LEVELS = (0, 50, 200, 600, 1000)
STREAMS_PER_CONNECTION = 100
START_BOUND = 300.0  # seconds for a server to compile its model and write its port
FIRST_STATUS_BOUND = 10.0  # seconds for the newest streams' first statuses
STOP_BOUND = 30.0  # seconds after SIGTERM before the process is killed


@dataclass(frozen=True)
class Design:
    name: str
    command: list[str]


def designs(baseline: str | None, baseline_args: list[str]) -> list[Design]:
    """This ``petlab-server``, and the baseline's when given."""
    found = [Design("petlab-server", [str(SERVER), "serve", *MODEL_FLAGS])]
    if baseline:
        found.insert(0, Design("baseline", [baseline, "serve", *MODEL_FLAGS, *baseline_args]))
    return found


def process_status(process: ServerProcess, field: str) -> int:
    """A number of ``/proc/PID/status``: ``VmRSS`` (KiB), ``Threads``."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{process.pid}/status")


def own_connection(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


KINDS = ("health", "reflection")


class IdleStreams:
    """Idle response streams: health ``Watch`` (first status read) or reflection
    ``ServerReflectionInfo`` (one ``list_services`` asked and answered, the request side left open:
    the sync server gives such a stream a thread of its own), then never read again."""

    def __init__(self, address: str, kind: str, per_connection: int = STREAMS_PER_CONNECTION):
        self.address, self.kind, self.per_connection = address, kind, per_connection
        self.channels: list[grpc.aio.Channel] = []
        self.calls: list = []
        self.held: list = []

    async def grow(self, total: int) -> int:
        """Open streams until ``total`` were asked for; returns how many are held."""
        new = []
        while len(self.calls) < total:
            if len(self.calls) % self.per_connection == 0:
                self.channels.append(own_connection(self.address))
            if self.kind == "health":
                call = health_pb2_grpc.HealthStub(self.channels[-1]).Watch(
                    health_pb2.HealthCheckRequest(service="")
                )
            else:
                call = reflection_pb2_grpc.ServerReflectionStub(self.channels[-1]).ServerReflectionInfo()
            self.calls.append(call)
            new.append(call)

        async def first(call) -> bool:
            try:
                if self.kind == "reflection":
                    request = reflection_pb2.ServerReflectionRequest(list_services="")
                    await asyncio.wait_for(call.write(request), FIRST_STATUS_BOUND)
                response = await asyncio.wait_for(call.read(), FIRST_STATUS_BOUND)
            except (TimeoutError, grpc.aio.AioRpcError):
                return False
            if response is grpc.aio.EOF:
                return False
            return self.kind == "reflection" or response.status == health_pb2.HealthCheckResponse.SERVING

        answered = await asyncio.gather(*(first(call) for call in new))
        self.held += [call for call, ok in zip(new, answered, strict=True) if ok]
        await asyncio.sleep(0.5)  # a stream the server evicts after its first status ends here
        self.held = [call for call in self.held if not call.done()]
        return len(self.held)

    async def close(self) -> None:
        for call in self.calls:
            call.cancel()
        for channel in self.channels:
            await channel.close()


@dataclass
class Latency:
    answered: int
    median_ms: float | None
    p99_ms: float | None
    failure: str = ""  # the status of the first call that failed, if any


async def cheap_calls(call, calls: int, timeout: float) -> Latency:
    """``calls`` calls one after another; three failures in a row end the series."""
    times, failures, first_failure = [], 0, ""
    for _ in range(calls):
        started = time.perf_counter()
        try:
            await call(timeout)
        except grpc.aio.AioRpcError as exc:
            first_failure = first_failure or exc.code().name
            failures += 1
            if failures >= 3:
                break
            continue
        failures = 0
        times.append((time.perf_counter() - started) * 1000)
    if not times:
        return Latency(0, None, None, first_failure)
    median, p99 = statistics.median(times), float(np.percentile(times, 99))
    return Latency(len(times), round(median, 3), round(p99, 3), first_failure)


@dataclass
class Row:
    server: str
    stream: str
    streams_asked: int
    streams_held: int
    threads: int
    rss_mib: float
    rss_per_stream_kib: float | None
    calls: int
    check_answered: int
    check_median_ms: float | None
    check_p99_ms: float | None
    list_answered: int
    list_median_ms: float | None
    list_p99_ms: float | None
    failure: str  # the first failed cheap call's status (Check, else ListModels)
    classify_seconds: float | None  # one encrypted classification by a device, keys registered
    # SIGTERM to exit with every held stream open (the last level's row); "killed": not in STOP_BOUND
    sigterm_exit_seconds: float | str | None = None


async def measure_design(
    process: ServerProcess,
    name: str,
    kind: str,
    levels: tuple[int, ...],
    calls: int,
    timeout: float,
    per_connection: int = STREAMS_PER_CONNECTION,
    cache: Path | None = None,
) -> list[Row]:
    device = Device(process.address, cache) if cache is not None else None
    if device is not None:
        await asyncio.to_thread(device.classify)  # keys registered before the baseline memory
    probe = own_connection(process.address)
    health = health_pb2_grpc.HealthStub(probe)
    knn = knn_pb2_grpc.KnnServiceStub(probe)

    async def check(deadline: float) -> None:
        await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=deadline)

    async def list_models(deadline: float) -> None:
        await knn.ListModels(knn_pb2.ListModelsRequest(), timeout=deadline)

    streams = IdleStreams(process.address, kind, per_connection)
    rows: list[Row] = []
    try:
        await cheap_calls(check, 20, timeout)  # warm both paths before the baseline memory
        await cheap_calls(list_models, 20, timeout)
        baseline = process_status(process, "VmRSS")
        for level in levels:
            rows.append(
                await _level_row(
                    process, streams, level, name, kind, calls, timeout, baseline, check, list_models, device
                )
            )
            print(asdict(rows[-1]), flush=True)
        seconds = await asyncio.to_thread(process.stop, STOP_BOUND)
        rows[-1].sigterm_exit_seconds = (
            f"killed after {STOP_BOUND:.0f}" if seconds is None else round(seconds, 2)
        )
    finally:
        await streams.close()
        await probe.close()
        if device is not None:
            device.close()
    return rows


async def _level_row(
    process: ServerProcess,
    streams: IdleStreams,
    level: int,
    name: str,
    kind: str,
    calls: int,
    timeout: float,
    baseline: int,
    check: Callable[[float], Awaitable[None]],
    list_models: Callable[[float], Awaitable[None]],
    device: Device | None,
) -> Row:
    """Grow the idle streams to ``level``, then measure the server beside them: memory, threads,
    ``calls`` cheap calls of each kind and one classification."""
    held = await streams.grow(level)
    rss, threads = process_status(process, "VmRSS"), process_status(process, "Threads")
    checks = await cheap_calls(check, calls, timeout)
    listed = await cheap_calls(list_models, calls, timeout)
    classified = None if device is None else await asyncio.to_thread(device.classify)
    return Row(
        name,
        kind,
        level,
        held,
        threads,
        round(rss / 1024, 1),
        round((rss - baseline) / held, 1) if held else None,
        calls,
        checks.answered,
        checks.median_ms,
        checks.p99_ms,
        listed.answered,
        listed.median_ms,
        listed.p99_ms,
        checks.failure or listed.failure,
        classified,
    )


class Device:
    """A device classifying one Iris flower through ``address`` (keys in ``cache``)."""

    def __init__(self, address: str, cache: Path):
        from petlab.client.knn_client import KnnRemote, make_channel

        self.channel = make_channel(address)
        self.remote = KnnRemote(
            self.channel, "server-design", cache_dir=cache, timeout=300, show_progress=False
        )
        self.prepared: PreparedModel | None = None

    def classify(self) -> float | None:
        """Seconds for one classification (None when it failed)."""
        try:
            prepared = self.prepared or self.remote.prepare("iris")
            self.prepared = prepared
            started = time.perf_counter()
            self.remote.classify(prepared, np.array([5.1, 3.5, 1.4, 0.2]))
            return round(time.perf_counter() - started, 3)
        except grpc.RpcError:
            return None

    def close(self) -> None:
        self.channel.close()


def measure(
    kinds: tuple[str, ...],
    levels: tuple[int, ...],
    calls: int,
    timeout: float,
    work: Path,
    per_connection: int = STREAMS_PER_CONNECTION,
    baseline: str | None = None,
    baseline_args: tuple[str, ...] = (),
) -> list[Row]:
    """Each kind of stream against each design, a fresh server process for each pair."""
    rows: list[Row] = []
    cache = work / "device-cache"
    for kind in kinds:
        for design in designs(baseline, list(baseline_args)):
            directory = work / f"{design.name}-{kind}"
            directory.mkdir(parents=True)
            process = ServerProcess(directory, command=design.command, start_seconds=START_BOUND)
            try:
                measured = measure_design(
                    process, design.name, kind, levels, calls, timeout, per_connection, cache
                )
                rows += asyncio.run(measured)
            finally:
                process.kill()
    return rows


def markdown(rows: list[Row], command: str) -> str:
    def cell(value) -> str:
        return "–" if value is None else str(value)

    lines = [
        "# The server beside idle response streams: memory, threads, cheap calls, a classification",
        "",
        f"Command: `{command}`. Machine: {os.cpu_count()} cores. Latencies in ms (client side), "
        "memory is the server's VmRSS; stop is SIGTERM to exit with every held stream open (`--grace 1`).",
        "",
    ]
    cells = []
    for row in rows:
        values = [
            row.server,
            row.stream,
            row.streams_asked,
            row.streams_held,
            row.threads,
            row.rss_mib,
            row.rss_per_stream_kib,
            f"{row.check_answered}/{row.calls}",
            row.check_median_ms,
            row.check_p99_ms,
            f"{row.list_answered}/{row.calls}",
            row.list_median_ms,
            row.list_p99_ms,
            row.failure or None,
            row.classify_seconds,
            row.sigterm_exit_seconds,
        ]
        cells.append([cell(v) for v in values])
    header = ["server", "stream", "streams asked", "held", "threads", "RSS MiB", "KiB/stream"]
    header += ["Check answered", "Check median", "Check p99", "ListModels answered", "ListModels median"]
    header += ["ListModels p99", "first failure", "classify s", "SIGTERM to exit s"]
    align = ["left", "left"] + ["right"] * 11 + ["left", "right", "right"]
    lines.append(markdown_table(header, cells, align))
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--levels", default=",".join(map(str, LEVELS)), help="idle streams to hold, in turn (comma-separated)"
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help="idle streams: health, reflection or both")
    parser.add_argument(
        "--streams-per-connection",
        type=int,
        default=STREAMS_PER_CONNECTION,
        help="idle streams opened on one client connection before the next is opened",
    )
    parser.add_argument("--calls", type=int, default=200, help="cheap calls of each kind at each level")
    parser.add_argument(
        "--baseline",
        default=None,
        help="another petlab-server executable to measure beside this one (an earlier version's)",
    )
    parser.add_argument(
        "--baseline-args", default="", help="extra flags for the baseline's serve (space-separated)"
    )
    parser.add_argument("--call-timeout", type=float, default=2.0, help="deadline of each cheap call, s")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/server_design.csv"),
        help="the CSV to write (a Markdown table beside it)",
    )


def run(args: argparse.Namespace) -> int:
    levels = tuple(sorted(int(level) for level in args.levels.split(",")))
    kinds = tuple(args.kinds.split(","))
    if not set(kinds) <= set(KINDS):
        raise SystemExit(f"--kinds: {', '.join(KINDS)}")
    if not 1 <= args.streams_per_connection <= 5000:
        raise SystemExit("--streams-per-connection must be between 1 and 5000")
    if not levels or levels[0] < 0 or levels[-1] > 5000 or not 1 <= args.calls <= 10_000:
        raise SystemExit("--levels must be between 0 and 5000, --calls between 1 and 10000")
    work = Path(tempfile.mkdtemp(prefix="petlab-server-design-"))
    try:
        rows = measure(
            kinds,
            levels,
            args.calls,
            args.call_timeout,
            work,
            args.streams_per_connection,
            args.baseline,
            tuple(args.baseline_args.split()),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)
    command = "petlab-experiments server-design " + " ".join(sys.argv[2:])
    args.out.with_suffix(".md").write_text(markdown(rows, command.strip()))
    print(args.out.with_suffix(".md").read_text())
    return 0
