"""The server never freezes and always stops, whatever its health watchers do.

A health servicer that sends each status change to every ``Watch`` stream holding its lock (grpc's
own did) lets one watcher with a zero HTTP/2 window freeze health ``Check``, and a watcher leaving
at that moment freeze the server. The hostile peers are real HTTP/2
connections (``petlab.experiments.liveness_peers``) against a real ``petlab-server`` process and
against in-process servers; every wait here is bounded, so a regression fails, never hangs.
"""

from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.experiments.liveness_peers import (
    PROBE_SECONDS,
    RawWatch,
    attack,
    flip,
    liveness_server,
)
from petlab.plaindata import acs_sample_path
from petlab.server.app import STOP_MARGIN_SECONDS
from petlab.server.common.health import NOT_SERVING, SERVING

SEND_SECONDS = 1.0
DROPPED = "dropped a health watcher"  # the server's log line for each
NO_RESCUE_SECONDS = 60.0  # a send deadline that frees no stuck watcher while a test runs
GRACE = 2.0


def controller_only(serve, tmp_path, send_seconds: float = SEND_SECONDS, **options):
    """An in-process server with the controller only (no circuit), a short send deadline unless
    ``send_seconds``."""
    return serve(
        tmp_path, analysis_data=acs_sample_path(), open_analysis=True, send_seconds=send_seconds, **options
    )


def check(address: str, timeout: float = PROBE_SECONDS) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout).status


def test_hostile_watchers_while_health_flips_then_sigterm_stops_the_process(tmp_path):
    """Zero-window, non-reading and leaving watchers while health flips 60 times (the owner's
    SIGUSR1): ``Check`` and ``ListModels`` answer within their deadline throughout, the hostile
    watchers are dropped, and SIGTERM ends the process within grace + 5 s."""
    server = liveness_server(tmp_path / "server", grace=GRACE)
    try:
        result = attack(server.address, flip(server), flips=60, zero_window=1, non_readers=1, leavers=2)
        assert not result.hung, result.failures
        assert result.calls >= 20, result
        assert DROPPED in server.log.read_text(), "a hostile watcher was never dropped"
        exited = server.terminate(GRACE + 5.0)
        assert exited is not None, "still running grace + 5 s after SIGTERM"
    finally:
        server.kill()


def test_a_watcher_that_takes_nothing_is_dropped_within_the_send_deadline(serve, tmp_path, caplog):
    """Zero-window health watchers: once health changes, each send that the peer does not take
    within ``send_seconds`` ends the watcher's call on the server (logged); no thread, and no
    coroutine, is held for the stream's lifetime."""
    caplog.set_level(logging.INFO, logger="petlab.server.common.health")
    with controller_only(serve, tmp_path) as running:
        peers = [RawWatch("127.0.0.1", running.port, window=0) for _ in range(2)]
        try:
            time.sleep(0.3)
            control = running.health_control
            assert control is not None
            deadline = time.monotonic() + SEND_SECONDS + 10
            flips = 0
            while caplog.text.count(DROPPED) < len(peers) and time.monotonic() < deadline:
                control.set_maintenance(flips % 2 == 0)
                flips += 1
                time.sleep(0.2)
            assert caplog.text.count(DROPPED) == len(peers), "a stuck watcher was never dropped"
        finally:
            for peer in peers:
                peer.close()


def test_a_health_flip_never_waits_on_a_watcher(serve, tmp_path):
    """Each flip (the maintenance toggle and the cluster's, through the same ``HealthControl``)
    returns at once while zero-window and non-reading watchers are open, and ``Check`` sees it. No
    send deadline frees the stuck watchers meanwhile: the flips themselves must not wait."""
    with controller_only(serve, tmp_path, NO_RESCUE_SECONDS) as running:
        control = running.health_control
        assert control is not None
        peers = [RawWatch("127.0.0.1", running.port, window) for window in (0, 7, 0, 7)]
        try:
            time.sleep(0.3)  # the first status is on its way to every peer
            for flip in range(40):
                down = flip % 2 == 0
                began = time.monotonic()
                flipper = threading.Thread(target=control.set_maintenance, args=(down,), daemon=True)
                flipper.start()
                flipper.join(timeout=3.0)
                assert not flipper.is_alive(), "a health flip waited on a watcher"
                assert time.monotonic() - began < 3.0
                assert check(f"127.0.0.1:{running.port}") == (NOT_SERVING if down else SERVING)
        finally:
            for peer in peers:
                peer.close()


def test_stop_returns_within_grace_whatever_the_watchers_do(serve, tmp_path):
    """``RunningServer.stop(grace)`` returns within grace + the margin with stuck watchers open
    (which no send deadline frees meanwhile)."""
    with controller_only(serve, tmp_path, NO_RESCUE_SECONDS) as running:
        peers = [RawWatch("127.0.0.1", running.port, window) for window in (0, 7)]
        try:
            time.sleep(0.3)
            stopper = threading.Thread(target=running.stop, args=(1.0,), daemon=True)
            began = time.monotonic()
            stopper.start()
            stopper.join(timeout=1.0 + STOP_MARGIN_SECONDS + 2)
            assert not stopper.is_alive(), "stop did not return"
            assert time.monotonic() - began < 1.0 + STOP_MARGIN_SECONDS + 2
        finally:
            for peer in peers:
                peer.close()


@pytest.mark.parametrize("length", [0, 200, 201, 5000])
def test_check_and_watch_answer_any_service_name(serve, tmp_path, length):
    """Unknown (or overlong) names: ``Check`` says NOT_FOUND, ``Watch`` SERVICE_UNKNOWN."""
    with (
        controller_only(serve, tmp_path) as running,
        grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch,
    ):
        stub = health_pb2_grpc.HealthStub(ch)
        name = "x" * length
        if length == 0:
            assert stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status == SERVING
            return
        with pytest.raises(grpc.RpcError) as refused:
            stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        watch.cancel()
