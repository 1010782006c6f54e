"""A bounded load test: many concurrent clients, mixed valid and invalid calls, for a few seconds on
loopback, while every evaluation slot is held by a running classification (every k-NN worker
thread busy), every upload slot by an idle upload, and idle streams from many connections sit
open: more health ``Watch`` streams and reflection streams than the server has threads, and more
idle uploads than it has upload slots. Cheap calls (the k-NN service's, health ``Check`` and the
controller's ``Describe``) must keep answering: it prints their p50/p99 latency and fails on any
unanswered call or a p99 above a generous no-stall bound.

The evaluations are stand-ins: concrete's evaluation is replaced by a wait on an event (the
servicer's slots, the evaluator's model lock and the threads are the real ones), so the test needs
no key generation and each "evaluation" lasts exactly as long as the load does; the stand-in keys
and queries pass a stand-in of the wire-format check (``crypto.knn.wire_format``).
"""

from __future__ import annotations

import contextlib
import hashlib
import statistics
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2_grpc

import petlab.server.knn.evaluators as evaluators
import petlab.server.knn.service as knn_service
from petlab.client.knn_client import make_channel
from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.knn.wire_format import WireFormat
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc, knn_pb2, knn_pb2_grpc
from petlab.server.common.admission import ServiceLimits
from petlab.server.knn.service import key_tag

CLIENTS = 16
SECONDS = 8.0
P99_BOUND = 2.0  # seconds; loopback answers take milliseconds, a stall takes the 10 s deadline
WORKERS = 8
IDLE_WATCHES = 3 * WORKERS  # health Watch streams, each from its own connection
IDLE_REFLECTIONS = 2 * WORKERS  # reflection streams that never send a request
IDLE_UPLOADS = 4  # key uploads that never send a chunk (twice the upload slots)


def own_connection(port: int) -> grpc.Channel:
    """A channel with a connection of its own (grpc shares connections between equal channels)."""
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])


def test_cheap_calls_answer_while_evaluations_and_uploads_hold_their_slots(
    serve, hosted_model, tmp_path, monkeypatch
):
    release = threading.Event()

    def long_evaluation(server, keys, query):
        release.wait(SECONDS * 4)
        return b""

    for module in (knn_service, evaluators):
        monkeypatch.setattr(module, "parse_evaluation_keys", lambda data: object())
        monkeypatch.setattr(module, "parse_ciphertext", lambda data: object())
    monkeypatch.setattr(evaluators, "run_encrypted", long_evaluation)
    monkeypatch.setattr(WireFormat, "check_keys", lambda self, data: data)
    monkeypatch.setattr(WireFormat, "check_input", lambda self, data, position=0: data)

    def idle_upload():
        release.wait(SECONDS * 4)
        return
        yield

    limits = ServiceLimits(first_chunk_seconds=SECONDS * 3, evaluation_slots=WORKERS)
    evaluations = limits.evaluation_slots  # every k-NN worker thread held by one
    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    controller = {"analysis_data": acs_sample_path(), "open_analysis": True, "workers": WORKERS}
    with (
        serve(tmp_path, hosted, limits=limits, **controller) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        data = b"stand-in keys"
        key_id = running.keys.put(
            key_tag(running.hosted["iris"]), "load", len(data), hashlib.sha256(data).hexdigest(), [data]
        ).key_id
        stub = knn_pb2_grpc.KnnServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        held = [
            stub.Classify.future(
                knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=b"q"), timeout=60
            )
            for _ in range(evaluations)
        ]
        connections = [
            own_connection(running.port) for _ in range(IDLE_WATCHES + IDLE_REFLECTIONS + IDLE_UPLOADS)
        ]
        streams: list = []
        try:
            streams += [
                health_pb2_grpc.HealthStub(c).Watch(health_pb2.HealthCheckRequest(), timeout=60)
                for c in connections[:IDLE_WATCHES]
            ]
            streams += [
                reflection_pb2_grpc.ServerReflectionStub(c).ServerReflectionInfo(idle_upload(), timeout=60)
                for c in connections[IDLE_WATCHES : IDLE_WATCHES + IDLE_REFLECTIONS]
            ]
            held += [
                knn_pb2_grpc.KnnServiceStub(c).RegisterKeys.future(idle_upload(), timeout=60)
                for c in connections[IDLE_WATCHES + IDLE_REFLECTIONS :]
            ]
            for watch in streams[:IDLE_WATCHES]:  # each watch open: its first status came
                assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
            describe = controller_pb2_grpc.AnalysisControllerStub(channel).Describe

            cheap = [
                (
                    "ListModels",
                    lambda: stub.ListModels(knn_pb2.ListModelsRequest(), timeout=10),
                    grpc.StatusCode.OK,
                ),
                (
                    "Health",
                    lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=10),
                    grpc.StatusCode.OK,
                ),
                (
                    "Describe",
                    lambda: describe(controller_pb2.DescribeRequest(), timeout=10),
                    grpc.StatusCode.OK,
                ),
                (
                    "GetClientSpecs",
                    lambda: stub.GetClientSpecs(knn_pb2.GetClientSpecsRequest(model="iris"), timeout=10),
                    grpc.StatusCode.OK,
                ),
            ]
            invalid = [
                (
                    "unknown model",
                    lambda: stub.GetClientSpecs(knn_pb2.GetClientSpecsRequest(model="nope"), timeout=10),
                    grpc.StatusCode.NOT_FOUND,
                ),
                (
                    "Classify while busy",
                    lambda: stub.Classify(knn_pb2.ClassifyRequest(model="iris", key_id="bad"), timeout=10),
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                ),
            ]
            latencies: list[float] = []
            wrong: list[str] = []
            lock = threading.Lock()
            stop_at = time.monotonic() + SECONDS

            def client(number: int) -> None:
                calls = cheap + invalid
                i = number
                while time.monotonic() < stop_at:
                    name, call, expected = calls[i % len(calls)]
                    i += 1
                    started = time.perf_counter()
                    try:
                        call()
                        status = grpc.StatusCode.OK
                    except grpc.RpcError as exc:
                        status = exc.code()
                    elapsed = time.perf_counter() - started
                    with lock:
                        if status != expected:
                            wrong.append(f"{name}: {status.name}")
                        elif expected == grpc.StatusCode.OK:
                            latencies.append(elapsed)

            threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(SECONDS + 30)
            evaluations_still_running = not any(f.done() for f in held[:evaluations])
            streams_still_open = sum(not stream.done() for stream in streams)
            release.set()
            for future in held:
                with contextlib.suppress(grpc.RpcError):
                    future.result(timeout=30)
        finally:  # whatever happened, nothing is left waiting
            release.set()
            for stream in streams:
                stream.cancel()
            for connection in connections:
                connection.close()

    assert evaluations_still_running, "the stand-in evaluations ended before the load did"
    assert streams_still_open == len(streams), "the idle streams ended before the load did"
    assert not wrong, f"unexpected answers: {wrong}"
    assert len(latencies) >= 100, f"only {len(latencies)} cheap calls answered in {SECONDS:g} s: a stall"
    quantiles = statistics.quantiles(latencies, n=100)
    p50, p99 = quantiles[49], quantiles[98]
    print(
        f"\nload: {len(latencies)} cheap calls from {CLIENTS} clients in {SECONDS:g} s: "
        f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
    )
    assert p99 < P99_BOUND
