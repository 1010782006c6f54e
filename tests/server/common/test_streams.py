"""No response stream can hold the server (issue 23, ``server.common.streams``): a fail-fast budget,
time limits, and interceptors that keep grpc's non-blocking attribute. The load test
(``tests/server/common/test_load.py``) holds the server with idle streams from many connections; here, the
budget and the limits themselves, on a controller-only server (no model, no key material)."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2_grpc

from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc
from petlab.server.common.request_arrival import RequestArrival
from petlab.server.common.streams import StreamGuard, StreamLimits
from petlab.server.common.thread_share import CallTimeLimit, ThreadShare
from petlab.server.common.undecodable import UndecodableRequests

CONTROLLER = {"analysis_data": acs_sample_path(), "open_analysis": True}


def own_connection(port: int) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])


class _Context:
    """What a non-blocking stream's behaviour uses of its servicer context."""

    def __init__(self):
        self.callbacks: list = []

    def add_callback(self, callback) -> bool:
        self.callbacks.append(callback)
        return True

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def peer_identities(self) -> None:
        return None


def test_interceptors_keep_grpcs_attributes():
    """The health servicer's Watch is non-blocking (it returns at once and holds no thread) only
    while its behaviour carries ``experimental_non_blocking`` and receives the response callback;
    wrapped in a lambda by UndecodableRequests, it fell back to a generator holding a pool thread
    per idle stream (8 froze the server)."""
    servicer = health.HealthServicer(experimental_non_blocking=True)
    handler = grpc.unary_stream_rpc_method_handler(
        servicer.Watch,
        health_pb2.HealthCheckRequest.FromString,
        health_pb2.HealthCheckResponse.SerializeToString,
    )
    details = type("Details", (), {"method": "/grpc.health.v1.Health/Watch", "invocation_metadata": ()})()
    guard = StreamGuard(StreamLimits(slots=2))
    try:
        interceptors = (UndecodableRequests(), guard, CallTimeLimit(60.0), ThreadShare(["x"], 1))
        for interceptor in interceptors:
            wrapped = interceptor.intercept_service(lambda _: handler, details)
            assert wrapped.unary_stream.experimental_non_blocking, type(interceptor).__name__
            sent: list = []
            context = _Context()
            assert wrapped.unary_stream(health_pb2.HealthCheckRequest(), context, sent.append) is None
            assert len(sent) == 1 and sent[0].status == health_pb2.HealthCheckResponse.SERVING
            for callback in context.callbacks:  # the call ends: the watcher and the guard's slot go
                callback()
        assert guard.open_streams() == 0
        # read by RequestArrival (outermost) from a request stream, then still non-blocking
        streamed = RequestArrival(5.0).intercept_service(lambda _: handler, details).stream_stream
        assert streamed.experimental_non_blocking
        sent = []
        assert streamed(iter([health_pb2.HealthCheckRequest()]), _Context(), sent.append) is None
        assert len(sent) == 1
    finally:
        guard.close()


def test_streams_beyond_the_budget_are_refused_and_idle_or_old_ones_end(serve, tmp_path, silent_requests):
    """Attack: more idle streams than the budget, from as many connections. The budget's streams
    are held, the next ones refused at once (RESOURCE_EXHAUSTED with a retry hint), the controller
    answers meanwhile; a reflection stream without a request for ``idle_seconds`` and any stream
    older than ``lifetime_seconds`` is cancelled, and its slot comes back."""
    limits = StreamLimits(slots=3, idle_seconds=1.0, lifetime_seconds=2.5)
    with serve(tmp_path / "data", None, streams=limits, **CONTROLLER) as running:
        connections = [own_connection(running.port) for _ in range(6)]
        try:
            idle = [
                reflection_pb2_grpc.ServerReflectionStub(c).ServerReflectionInfo(
                    silent_requests(), timeout=20
                )
                for c in connections[:4]
            ]
            deadline = time.monotonic() + 10
            while sum(call.done() for call in idle) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            refused = [call for call in idle if call.done()]
            assert len(refused) == 1 and refused[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert ("retry-after-s", "5") in refused[0].trailing_metadata()
            watch = health_pb2_grpc.HealthStub(connections[4]).Watch(
                health_pb2.HealthCheckRequest(), timeout=20
            )
            with pytest.raises(grpc.RpcError) as failure:
                next(watch)
            assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            controller = controller_pb2_grpc.AnalysisControllerStub(connections[5])
            assert controller.Describe(controller_pb2.DescribeRequest(), timeout=5).controller_id

            held = [call for call in idle if call not in refused]
            time.sleep(limits.idle_seconds + 0.8)
            assert all(call.done() and call.code() == grpc.StatusCode.CANCELLED for call in held)
            started = time.monotonic()
            watch = health_pb2_grpc.HealthStub(connections[4]).Watch(
                health_pb2.HealthCheckRequest(), timeout=20
            )
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING  # a slot came back
            with pytest.raises(grpc.RpcError) as failure:
                next(watch)  # no status change: the stream ends at its lifetime
            assert failure.value.code() == grpc.StatusCode.CANCELLED
            assert limits.lifetime_seconds - 0.5 < time.monotonic() - started < limits.lifetime_seconds + 3
            time.sleep(0.2)
            assert running.streams is not None and running.streams.open_streams() == 0
        finally:
            silent_requests.release.set()
            for connection in connections:
                connection.close()


def test_calls_whose_request_never_comes_hold_no_thread_of_the_server(serve, tmp_path, silent_requests):
    """Red team: grpc reads a unary call's request in the thread the call runs on, with no time
    limit, before any interceptor's behaviour. A client that opens calls and never sends their
    message (no credentials needed) held one thread each: twice the workers of them, to health
    ``Check``, ``Watch`` and the controller's ``Describe`` from their own connections, froze the
    server. Now each waits on a thread of its own, is cancelled after ``request_seconds``, and the
    controller and health checks answer meanwhile; a call that ends without a message is
    INVALID_ARGUMENT."""
    workers, request_seconds = 8, 4.0

    def nothing():
        return
        yield

    methods = ["/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"]
    methods.append("/petlab.controller.v1.AnalysisController/Describe")
    options = {"workers": workers, "request_seconds": request_seconds, **CONTROLLER}
    with serve(tmp_path / "data", None, **options) as running:
        connections = [own_connection(running.port) for _ in range(2 * workers + 1)]
        try:
            held = [
                connection.stream_stream(methods[i % len(methods)])(silent_requests(), timeout=20)
                for i, connection in enumerate(connections[:-1])
            ]
            time.sleep(0.5)  # the calls are open, each waiting for its message
            probe = connections[-1]
            controller = controller_pb2_grpc.AnalysisControllerStub(probe)
            # within a time the withheld calls hold their threads (not after they are cancelled)
            assert controller.Describe(controller_pb2.DescribeRequest(), timeout=2).controller_id
            check = health_pb2_grpc.HealthStub(probe).Check(health_pb2.HealthCheckRequest(), timeout=2)
            assert check.status == health_pb2.HealthCheckResponse.SERVING
            codes = set()
            for call in held:
                with pytest.raises(grpc.RpcError) as failure:
                    next(call)
                codes.add(failure.value.code())
            assert codes == {grpc.StatusCode.CANCELLED}
            with pytest.raises(grpc.RpcError) as failure:
                probe.stream_unary("/grpc.health.v1.Health/Check")(nothing(), timeout=5)
            assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        finally:
            silent_requests.release.set()
            for connection in connections:
                connection.close()
