"""The server's threads do work only; a call waiting on its peer holds none, and every call ends
within the server's time limit. In-process servers on loopback, the k-NN work held by a stand-in
(``KnnServicer._check_and_run`` waiting on an event, on the real pool)."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from grpc_health.v1 import health_pb2, health_pb2_grpc

import petlab.server.knn.service as knn_service
from petlab.client.analyst import prepare
from petlab.client.knn_client import make_channel
from petlab.crypto.knn.model import KnnSettings
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc, knn_pb2, knn_pb2_grpc
from petlab.server.common.admission import ServiceLimits

WORKERS = 3


@pytest.fixture()
def held_evaluations(monkeypatch):
    """Every evaluation waits for the event (at most 30 s) on its worker thread."""
    release = threading.Event()
    running = []

    def held(self, hosted, key_id, ciphertext, owner, deadline):
        running.append(threading.current_thread().name)
        release.wait(30)
        return b""

    monkeypatch.setattr(knn_service.KnnServicer, "_check_and_run", held)
    yield release, running
    release.set()


def open_session(channel) -> None:
    document = prepare([{"type": "mean", "column": "age"}], Ed25519PrivateKey.generate())
    request = controller_pb2.OpenSessionRequest(
        first_trace=bytes.fromhex(document["traces"][0]),
        analyst_public_key=document["analyst_public_key"].encode(),
        analyst_signature=bytes.fromhex(document["analyst_signature"]),
    )
    controller_pb2_grpc.AnalysisControllerStub(channel).OpenSession(request, timeout=5)


def own_connection(port: int) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])


def test_every_knn_thread_busy_leaves_the_controller_and_cheap_calls_answered(
    serve, hosted_model, tmp_path, held_evaluations
):
    """Attack: more evaluations than the k-NN room has threads, from many connections. The pool
    runs at most ``--evaluation-slots`` of them (its threads), the rest wait their turn without a
    thread; health, ListModels and the controller (its own threads) answer at once meanwhile."""
    release, running_now = held_evaluations
    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    options = {
        "analysis_data": acs_sample_path(),
        "open_analysis": True,
        "workers": WORKERS,
        "limits": ServiceLimits(evaluation_slots=WORKERS),
    }
    with serve(tmp_path, hosted, **options) as running:
        connections = [own_connection(running.port) for _ in range(2 * WORKERS)]
        request = knn_pb2.ClassifyRequest(model="iris", key_id="0" * 32, encrypted_query=b"q")
        calls = [knn_pb2_grpc.KnnServiceStub(c).Classify.future(request, timeout=30) for c in connections]
        try:
            deadline = time.monotonic() + 10
            while len(running_now) < WORKERS and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            assert len(running_now) == WORKERS, "the pool ran more (or fewer) evaluations than its threads"
            with make_channel(f"127.0.0.1:{running.port}") as channel:
                started = time.perf_counter()
                for _ in range(3):
                    open_session(channel)
                    knn_pb2_grpc.KnnServiceStub(channel).ListModels(knn_pb2.ListModelsRequest(), timeout=5)
                    health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
                assert time.perf_counter() - started < 5
            release.set()
            for call in calls:
                assert call.result(timeout=30).encrypted_class == b""
            assert len(running_now) == len(calls)
        finally:
            release.set()
            for connection in connections:
                connection.close()


def test_a_call_past_the_server_time_limit_ends_deadline_exceeded(
    serve, hosted_model, tmp_path, held_evaluations
):
    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    with (
        serve(tmp_path, hosted, call_seconds=1.0) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        started = time.perf_counter()
        request = knn_pb2.ClassifyRequest(model="iris", key_id="0" * 32, encrypted_query=b"q")
        with pytest.raises(grpc.RpcError) as failure:
            knn_pb2_grpc.KnnServiceStub(channel).Classify(request, timeout=20)
        assert failure.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.perf_counter() - started < 5
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=20)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as ended:  # a watch is a call too
            next(watch)
        assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.perf_counter() - started < 8


def test_undecodable_requests_are_invalid_argument_on_every_service(serve, tmp_path):
    """Bytes that do not parse as the method's message: INVALID_ARGUMENT, never INTERNAL."""
    with (
        serve(tmp_path, analysis_data=acs_sample_path(), open_analysis=True) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        for method in (
            "/grpc.health.v1.Health/Check",
            "/petlab.knn.v1.KnnService/ListModels",
            "/petlab.controller.v1.AnalysisController/Describe",
        ):
            call = channel.unary_unary(method)
            with pytest.raises(grpc.RpcError) as failure:
                call(b"\xff\xff\xff", timeout=5)
            assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
