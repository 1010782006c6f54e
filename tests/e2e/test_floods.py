"""The floods an internet service meets, against a real ``petlab-server`` process, with a legitimate
caller beside each: its health ``Check`` and ``ListModels`` must each be answered within 5 s
throughout (``liveness_peers.probe``), and the process must end within ``--grace`` + 5 s of
SIGTERM or SIGINT afterwards. The server is the controller on the bundled ACS sample (no circuit
to compile); the floods that need encrypted queries are in ``test_fair_shares.py``.

Each attack here starved the thread-per-call server: rapid reset and reconnecting zero-window
watchers filled its RPC limit ("Concurrent RPC limit exceeded"), 1,100 idle connections took its
1,024 descriptors, a watch that never sent its request held a thread for 20 s; a second server
bound the same port (SO_REUSEPORT) and Ctrl-C was ignored once a call had run.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.crypto.chain.traces import public_key_pem, seal
from petlab.experiments.liveness_peers import (
    PROBE_SECONDS,
    Probe,
    RawWatch,
    idle_connections,
    liveness_server,
    ping_flood,
    probe,
    rapid_reset,
    silent_call,
    unread_unary_calls,
)
from petlab.experiments.server_process import ServerProcess
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc

GRACE = 2.0
SECONDS = 4.0  # each flood's length
EXIT_BOUND = GRACE + 5.0

pytestmark = pytest.mark.slow


def rss_bytes(pid: int) -> int:
    """The process's resident memory (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def descriptor_limit(soft: int) -> Iterator[None]:
    """Processes started meanwhile inherit a soft limit of ``soft`` open descriptors (a common
    default: the server raises its own to the hard limit at start)."""
    old_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (old_soft, hard))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ServerProcess]:
    """One server for the floods in turn (each must leave it serving the next), started with a
    soft limit of 1,024 descriptors."""
    with descriptor_limit(1024):
        running = liveness_server(tmp_path_factory.mktemp("floods"), grace=GRACE)
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture
def own_server(tmp_path) -> Iterator[ServerProcess]:
    """A server of the test's own, for a test that stops it."""
    running = liveness_server(tmp_path / "server", grace=GRACE)
    try:
        yield running
    finally:
        running.kill()


def beside(server: ServerProcess, attack: Callable[[], object], seconds: float) -> Probe:
    """Run ``attack`` while a legitimate caller probes ``Check`` and ``ListModels`` (each with a
    :data:`PROBE_SECONDS` deadline, each on a fresh connection) for at least ``seconds``."""
    stop, result = threading.Event(), Probe()
    prober = threading.Thread(target=probe, args=(server.address, stop, result), daemon=True)
    prober.start()
    try:
        began = time.monotonic()
        attack()
        time.sleep(max(seconds - (time.monotonic() - began), 0.0))
    finally:
        stop.set()
        prober.join(timeout=2 * PROBE_SECONDS + 5)
    assert not prober.is_alive(), "the probe never returned"
    return result


def assert_served(result: Probe, least: int = 4) -> None:
    assert not result.failures, result.failures
    assert result.calls >= least, result
    assert result.slowest_check < PROBE_SECONDS and result.slowest_list < PROBE_SECONDS


def assert_stops(server: ServerProcess, signum: int = signal.SIGTERM, status: int = 0) -> None:
    server.signal(signum)
    began = time.monotonic()
    try:
        code = server.process.wait(timeout=EXIT_BOUND)
    except Exception:
        pytest.fail(f"still running {EXIT_BOUND:g} s after signal {signum}")
    assert time.monotonic() - began < EXIT_BOUND
    assert code == status, f"exit status {code} after signal {signum}"


def in_threads(*attacks: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        threads = [threading.Thread(target=attack, daemon=True) for attack in attacks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    return run


def test_rapid_reset_on_four_connections(server):
    """HEADERS then RST_STREAM at once on four connections (CVE-2023-44487) for 6 s."""
    host, port = "127.0.0.1", server.port
    result = beside(server, in_threads(*[lambda: rapid_reset(host, port, SECONDS)] * 4), SECONDS)
    assert_served(result)


def test_ping_flood_whose_acks_are_never_read(server):
    host, port = "127.0.0.1", server.port
    result = beside(server, in_threads(*[lambda: ping_flood(host, port, SECONDS)] * 2), SECONDS)
    assert_served(result)


def test_a_hundred_zero_window_watchers_reconnecting_then_ctrl_c(own_server):
    """100 connections, each with one health Watch whose window is 0, reconnecting when dropped;
    then Ctrl-C ends the server (status 130) within --grace + 5 s."""
    server = own_server
    host, port = "127.0.0.1", server.port

    def watchers() -> None:
        peers = [RawWatch(host, port, window=0) for _ in range(100)]
        ends = time.monotonic() + SECONDS
        try:
            while time.monotonic() < ends:
                for i, peer in enumerate(peers):
                    if peer.ended_by_server.is_set():
                        peer.close()
                        peers[i] = RawWatch(host, port, window=0)
                time.sleep(0.1)
        finally:
            for peer in peers:
                peer.close()

    assert_served(beside(server, watchers, SECONDS))
    assert_stops(server, signal.SIGINT, 130)


def test_replies_never_read_hold_bounded_memory(server):
    """Unary calls at 500 a second on two connections that announce a zero window (no reply can be
    delivered): the server's memory grows by less than 64 MiB."""
    host, port, path = "127.0.0.1", server.port, "/petlab.controller.v1.AnalysisController/Describe"
    before = rss_bytes(server.pid)
    sent: list[int] = []
    result = beside(
        server,
        in_threads(*[lambda: sent.append(unread_unary_calls(host, port, path, b"", 6.0, 500))] * 2),
        6.0,
    )
    assert_served(result)
    grown = rss_bytes(server.pid) - before
    assert sum(sent) > 1000, sent
    assert grown < 64 << 20, f"the server grew by {grown >> 20} MiB"


def test_eleven_hundred_idle_connections_take_no_descriptor_the_server_needs(server):
    """1,100 idle TCP connections from one peer, beyond the soft limit of 1,024 descriptors the
    server was started with."""
    held: list[socket.socket] = []

    def connect() -> None:
        held.extend(idle_connections("127.0.0.1", server.port, 1100))

    try:
        result = beside(server, connect, 3.0)
        assert len(held) == 1100, f"only {len(held)} connections opened"
        assert_served(result, least=2)
    finally:
        for sock in held:
            sock.close()


def test_a_watch_whose_request_never_comes_holds_nothing(server):
    """Silent calls (HEADERS, never a request message) beside a well-behaved Watch, which gets its
    first status at once."""
    silent = [silent_call("127.0.0.1", server.port) for _ in range(20)]
    try:
        with grpc.insecure_channel(server.address) as channel:
            began = time.monotonic()
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=10)
            first = next(watch)
            assert first.status == health_pb2.HealthCheckResponse.SERVING
            assert time.monotonic() - began < 2.0
            watch.cancel()
    finally:
        for connection in silent:
            connection.close()


def test_a_second_server_on_the_same_port_or_directory_is_refused_then_sigterm(own_server, tmp_path):
    """No port sharing: a second server on a served port fails to start (exit 1, the port named),
    and so does a second server on a served data directory; the first serves on, undisturbed,
    and ends on SIGTERM (status 0) within --grace + 5 s."""
    server = own_server
    flags = ["--analysis-data", str(acs_sample_path()), "--open-analysis"]
    second = _start(["--port", str(server.port), "--data-dir", str(tmp_path / "other"), *flags])
    assert second.returncode == 1, second.stderr
    assert "port" in second.stderr and str(server.port) in second.stderr
    third = _start(["--port", "0", "--data-dir", str(server.log.parent / "data"), *flags])
    assert third.returncode == 1, third.stderr
    assert "data directory" in third.stderr
    with grpc.insecure_channel(server.address) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    assert_stops(server)


def _start(arguments: list[str]):
    import subprocess

    from petlab.experiments.server_process import SERVER

    return subprocess.run(
        [str(SERVER), "serve", "--grace", "1", *arguments], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("spec", [b"[" * 30000 + b"]" * 30000, b'{"a":' * 10000 + b"1" + b"}" * 10000])
def test_a_deeply_nested_spec_is_invalid_argument_not_internal(server, spec):
    """An analysis spec nested deeper than Python's JSON decoder recurses (60 kB, under the 64 KiB
    spec limit), revealed in a sequence the analyst sealed: the analyst's own bytes, so
    ``INVALID_ARGUMENT`` and the session aborted, not ``INTERNAL`` with a traceback in the log for
    every such call (the decoder's RecursionError is no ValueError)."""
    key = Ed25519PrivateKey.generate()
    sequence = seal([spec], key)
    with grpc.insecure_channel(server.address) as channel:
        stub = controller_pb2_grpc.AnalysisControllerStub(channel)
        opened = stub.OpenSession(
            controller_pb2.OpenSessionRequest(
                first_trace=sequence.traces[0],
                analyst_public_key=public_key_pem(key.public_key()),
                analyst_signature=sequence.analyst_signature,
            ),
            timeout=30,
        )
        pointer = sequence.pointers[0]
        request = controller_pb2.NextRequest(
            session_id=opened.session_id, trace=sequence.traces[1], pointer=pointer, spec=spec
        )
        with pytest.raises(grpc.RpcError) as refused:
            stub.Next(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert "not a canonical JSON object" in refused.value.details()


def test_after_the_floods_sigterm_ends_the_server(server):
    """Last in this module: the server that met the floods above (those run on this worker) ends on
    SIGTERM within --grace + 5 s, status 0."""
    assert_stops(server)
