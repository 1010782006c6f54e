"""The controller keeps its threads under any k-NN load, and every call has a server-side time
limit (issue 15, item 3). ``ListModels`` is made to block (its model description waits on an
event) so that k-NN calls can hold threads without any key material."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import petlab.server.knn.service as knn_service
from petlab.client.analyst import prepare
from petlab.client.knn_client import make_channel
from petlab.crypto.knn.model import KnnSettings
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc, knn_pb2, knn_pb2_grpc

WORKERS, RESERVED = 8, 2


@pytest.fixture()
def blocking_list_models(monkeypatch):
    release = threading.Event()
    original = knn_service.HostedModel.info

    def slow_info(self):
        release.wait(30)
        return original(self)

    monkeypatch.setattr(knn_service.HostedModel, "info", slow_info)
    yield release
    release.set()


def open_session(channel) -> grpc.StatusCode:
    document = prepare([{"type": "mean", "column": "age"}], Ed25519PrivateKey.generate())
    request = controller_pb2.OpenSessionRequest(
        first_trace=bytes.fromhex(document["traces"][0]),
        analyst_public_key=document["analyst_public_key"].encode(),
        analyst_signature=bytes.fromhex(document["analyst_signature"]),
    )
    controller_pb2_grpc.AnalysisControllerStub(channel).OpenSession(request, timeout=5)
    return grpc.StatusCode.OK


def test_controller_answers_while_knn_calls_take_every_thread_they_may(
    serve, hosted_model, tmp_path, blocking_list_models
):
    """Attack: more blocked k-NN calls than the server has threads. Those past the k-NN share are
    refused at once (RESOURCE_EXHAUSTED), and the controller's reserved threads answer it."""
    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    options = {
        "analysis_data": acs_sample_path(),
        "open_analysis": True,
        "workers": WORKERS,
        "controller_threads": RESERVED,
    }
    with serve(tmp_path, hosted, **options) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        stub = knn_pb2_grpc.KnnServiceStub(channel)
        blocked = [
            stub.ListModels.future(knn_pb2.ListModelsRequest(), timeout=30) for _ in range(WORKERS + 2)
        ]
        deadline = time.monotonic() + 10
        while sum(f.done() for f in blocked) < RESERVED + 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # until every k-NN call past the share has been refused
        time.sleep(0.3)  # and no more are: the others hold their threads
        refused = [f for f in blocked if f.done()]
        assert len(refused) == RESERVED + 2
        assert all(f.exception().code() == grpc.StatusCode.RESOURCE_EXHAUSTED for f in refused)
        started = time.perf_counter()
        for _ in range(3):
            assert open_session(channel) == grpc.StatusCode.OK
        assert time.perf_counter() - started < 5
        blocking_list_models.set()
        assert all(f.result(timeout=30).models for f in blocked if f not in refused)


def test_a_call_past_the_server_time_limit_is_cancelled(serve, hosted_model, tmp_path, blocking_list_models):
    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    with (
        serve(tmp_path, hosted, call_seconds=1.0) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        started = time.perf_counter()
        with pytest.raises(grpc.RpcError) as failure:
            knn_pb2_grpc.KnnServiceStub(channel).ListModels(knn_pb2.ListModelsRequest(), timeout=20)
        assert failure.value.code() == grpc.StatusCode.CANCELLED
        assert time.perf_counter() - started < 5
