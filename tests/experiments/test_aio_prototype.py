"""The ``grpc.aio`` prototype (``experiments/aio_server.py``, issue 29 point 2), in process: it
answers health, k-NN (through the executor, an abort included) and reflection, and stops within a
bound with watchers open; its health servicer holds no lock while a watcher's send is pending, and
20,000 status changes over a real socket never wait for a watcher that does not read (each of these
two fails with the ``yield`` of ``AsyncHealth.Watch`` moved inside its condition)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from petlab.crypto.knn.model import KnnSettings
from petlab.experiments.aio_server import (
    KNN_SERVICE,
    NOT_SERVING,
    SERVING,
    AioServer,
    AsyncHealth,
)
from petlab.protos import knn_pb2, knn_pb2_grpc
from petlab.server.app import ServerOptions, build_services

BOUND = 5.0  # seconds for any one step


@pytest.fixture
def services(tmp_path, hosted_model):
    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    options = ServerOptions(data_dir=tmp_path, models=[], port=0)
    return options, build_services(options, hosted)


async def _serve_and_call(options: ServerOptions, services) -> None:
    server = AioServer(options, services)
    port = await asyncio.wait_for(server.start(), BOUND)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = await health.Check(health_pb2.HealthCheckRequest(service=KNN_SERVICE), timeout=BOUND)
            assert answer.status == SERVING
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=BOUND)
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

            watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
            assert (await asyncio.wait_for(watch.read(), BOUND)).status == SERVING
            idle = health.Watch(health_pb2.HealthCheckRequest(service=""))  # never read again

            knn = knn_pb2_grpc.KnnServiceStub(channel)
            models = await knn.ListModels(knn_pb2.ListModelsRequest(), timeout=BOUND)
            assert [model.name for model in models.models] == ["iris"]
            with pytest.raises(grpc.aio.AioRpcError) as missing:  # abort raised in the executor
                await knn.GetClientSpecs(knn_pb2.GetClientSpecsRequest(model="absent"), timeout=BOUND)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND

            reflection = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo()
            await reflection.write(reflection_pb2.ServerReflectionRequest(list_services=""))
            listed = await asyncio.wait_for(reflection.read(), BOUND)
            assert KNN_SERVICE in {s.name for s in listed.list_services_response.service}

            stopping = asyncio.create_task(server.stop(grace=0.5))
            # the reading watcher hears NOT_SERVING; the idle one and the reflection stream are cut
            assert (await asyncio.wait_for(watch.read(), BOUND)).status == NOT_SERVING
            await asyncio.wait_for(stopping, BOUND)
            for call in (idle, reflection):  # ended by the stop, not by an answer
                assert await _end_status(call) not in (None, grpc.StatusCode.OK)
    finally:
        await asyncio.wait_for(server.server.stop(None), BOUND)  # harmless if already stopped


async def _end_status(call) -> grpc.StatusCode | None:
    """The status that ended ``call``, its unread messages read first (at most three; the client
    delivers the status after them); None if it is still open."""
    for _ in range(3):
        try:
            if await asyncio.wait_for(call.read(), BOUND) is grpc.aio.EOF:
                return await call.code()
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return None


def test_prototype_answers_health_knn_reflection_and_stops(services):
    options, built = services
    asyncio.run(_serve_and_call(options, built))


async def _suspended_watcher() -> None:
    health = AsyncHealth()
    await health.set("", SERVING)
    watcher = health.Watch(health_pb2.HealthCheckRequest(service=""), None)
    assert (await anext(watcher)).status == SERVING
    # the watcher is suspended at its send (grpc has not asked for the next message): a status
    # change and a Check must not wait for it
    await asyncio.wait_for(health.set("", NOT_SERVING), BOUND)
    assert (await health.Check(health_pb2.HealthCheckRequest(service=""), None)).status == NOT_SERVING
    assert (await asyncio.wait_for(anext(watcher), BOUND)).status == NOT_SERVING
    await watcher.aclose()


def test_a_watcher_suspended_at_a_send_holds_no_lock():
    asyncio.run(_suspended_watcher())


FLIPS = 20_000  # status changes: past a non-reading watcher's flow-control window (6,000 are not)


async def _flips_past_a_non_reading_watcher() -> None:
    server, health = grpc.aio.server(), AsyncHealth()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await health.set("", SERVING)
        options = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own
        # no BDP probe: the watcher's receive window stays at its initial size instead of growing
        small_window = [*options, ("grpc.http2.bdp_probe", 0)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=small_window) as watching:
            health_pb2_grpc.HealthStub(watching).Watch(health_pb2.HealthCheckRequest(service=""))
            await asyncio.sleep(0.2)  # the watcher's stream is open; it never reads
            for flip in range(FLIPS):
                await asyncio.wait_for(health.set("", NOT_SERVING if flip % 2 else SERVING), BOUND)
                await asyncio.sleep(0)  # the watcher sends
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as probing:
                request = health_pb2.HealthCheckRequest(service="")
                answer = await health_pb2_grpc.HealthStub(probing).Check(request, timeout=BOUND)
                assert answer.status == NOT_SERVING
            await asyncio.wait_for(server.stop(0.5), BOUND)
    finally:
        await asyncio.wait_for(server.stop(None), BOUND)


def test_health_flips_never_wait_for_a_watcher_that_does_not_read():
    """Over a real socket: with the condition held across the send, a ``set`` waited for the
    non-reading watcher's window (more than ``BOUND`` seconds) within 20,000 flips."""
    asyncio.run(_flips_past_a_non_reading_watcher())
