"""Fair shares between callers, through a real ``petlab-server`` process (issue 29, item 3).

One server (``iris``, n = 6, the fast family), one set of keys made once and registered twice (the
flooder's key id and the device's: anonymous callers share the key store), on loopback:

* an anonymous caller floods ``Classify`` from 6 threads on its own connection, then on six; a
  device beside it (``KnnRemote``, its ordinary retries on the ``retry-after-s`` hint) must get its
  class within a bound. Before fair shares it waited 57 s (issue 29) and now gives up after its
  40 s; ``measure_flood`` gives the figures, the test prints them;
* one caller opens every stream slot with health ``Watch`` streams; another caller's ``Watch``
  must still open (the flooder's oldest stream makes room) and its ``Check`` answer.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.client.knn_client import KnnRemote, PreparedModel
from petlab.experiments.server_process import ServerProcess
from petlab.protos import knn_pb2, knn_pb2_grpc

FLOOD_THREADS = 6
STREAM_SLOTS = 4
DEVICE_BOUND = 20.0  # seconds for the device's class under the flood (57 s without fair shares)

pytestmark = pytest.mark.slow


def fair_share_server(directory: Path) -> ServerProcess:
    """One ``petlab-server serve`` process on a free loopback port, stopped by ``stop``."""
    flags = ["--grace", "1", "--model", "iris", "--n", "6", "--k", "3", "--algorithm", "fast"]
    return ServerProcess(directory, [*flags, "--stream-slots", str(STREAM_SLOTS)])


def own_connection(address: str) -> grpc.Channel:
    """A channel with a connection of its own (grpc shares connections between equal channels)."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ServerProcess]:
    running = fair_share_server(tmp_path_factory.mktemp("fair-shares"))
    try:
        yield running
    finally:
        running.stop()


def keyed_devices(address: str, cache: Path) -> tuple[KnnRemote, PreparedModel, str]:
    """The device (keys made once, registered) and the flooder's key id: the same evaluation keys
    registered a second time, so no second key generation."""
    channel = own_connection(address)
    device = KnnRemote(channel, "device", cache_dir=cache, timeout=120, show_progress=False)
    prepared = device.prepare("iris")
    flooder = PreparedModel(prepared.info, prepared.client, prepared.quantizer, cache / "flooder")
    flooder.directory.mkdir(mode=0o700)
    return device, prepared, device.upload_keys(flooder)


def flood(
    address: str, key_id: str, query: bytes, stop: threading.Event, connections: int = 1
) -> tuple[list, Counter]:
    """``FLOOD_THREADS`` threads sending ``Classify`` on ``connections`` connections until ``stop``
    (retrying at once when refused); returns the channels, the threads and a tally by status."""
    channels = [own_connection(address) for _ in range(connections)]
    stubs = [knn_pb2_grpc.KnnServiceStub(channel) for channel in channels]
    tally: Counter = Counter()
    request = knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=query)

    def attack(stub) -> None:
        while not stop.is_set():
            try:
                stub.Classify(request, timeout=60)
                tally["OK"] += 1
            except grpc.RpcError as exc:
                tally[exc.code().name] += 1
                stop.wait(0.02)

    threads = [
        threading.Thread(target=attack, args=(stubs[n % connections],), daemon=True)
        for n in range(FLOOD_THREADS)
    ]
    for thread in threads:
        thread.start()
    return [channels, *threads], tally


def measure_flood(
    server: ServerProcess, cache: Path, connections: tuple[int, ...] = (1,)
) -> tuple[float, int, list[tuple[int, float, int, Counter]]]:
    """(one unflooded classification's seconds, its class, and for each number of connections the
    flood runs on: (connections, the device's seconds for its class beside it, that class, the
    flood's tally by status)). One key set for all."""
    device, prepared, flooder_key = keyed_devices(server.address, cache)
    features = np.array([5.9, 3.0, 5.1, 1.8])
    started = time.perf_counter()
    expected = device.classify(prepared, features)
    alone = time.perf_counter() - started
    query = prepared.encrypt_levels(prepared.quantizer.transform(features))
    device.timeout = 2 * DEVICE_BOUND  # the device's own patience, retries included
    results = []
    try:
        for count in connections:
            results.append((count, *flooded_device(server, device, prepared, flooder_key, query, count)))
    finally:
        device.channel.close()
    return alone, expected, results


def flooded_device(server, device, prepared, flooder_key, query, connections) -> tuple[float, int, Counter]:
    """The device's seconds for its class beside a flood on ``connections`` connections, the
    class (-1: none in its patience), the flood's tally."""
    features = np.array([5.9, 3.0, 5.1, 1.8])
    stop = threading.Event()
    (channels, *threads), tally = flood(server.address, flooder_key, query, stop, connections)
    try:
        settle = time.monotonic() + 30  # the flood holds the slots before the device asks
        while tally["OK"] + tally["RESOURCE_EXHAUSTED"] < FLOOD_THREADS and time.monotonic() < settle:
            time.sleep(0.05)
        started = time.perf_counter()
        try:
            got = device.classify(prepared, features)
        except grpc.RpcError as exc:  # still refused when its patience ran out
            got = -1
            print(f"\nthe device gave up after {time.perf_counter() - started:.1f} s: {exc.code().name}")
        return time.perf_counter() - started, got, tally
    finally:
        stop.set()
        for thread in threads:
            thread.join(90)
        for channel in channels:
            channel.close()


def test_a_device_classifies_beside_an_anonymous_flood(server, tmp_path):
    """The flood on one connection, then on six (one caller each, on loopback: a round robin
    between them and the device, not six shares against one)."""
    alone, expected, results = measure_flood(server, tmp_path / "cache", (1, FLOOD_THREADS))
    print(f"\nfair shares: one classification alone {alone:.2f} s")
    for connections, flooded, got, tally in results:
        print(
            f"beside a {FLOOD_THREADS}-thread anonymous flood on {connections} connection(s): "
            f"{flooded:.2f} s (flood answers: {dict(tally)})"
        )
        assert tally["OK"] >= 1 and tally["RESOURCE_EXHAUSTED"] >= 1, "the flood never held the slots"
        assert flooded < DEVICE_BOUND, f"the device waited {flooded:.1f} s beside {connections} connection(s)"
        assert got == expected


def watch(address: str) -> tuple[grpc.Channel, grpc.Future]:
    channel = own_connection(address)
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=60)
    return channel, stream


def test_one_caller_cannot_hold_every_stream_slot(server):
    held: list[tuple[grpc.Channel, grpc.Future]] = []
    hog = own_connection(server.address)
    try:
        hog_health = health_pb2_grpc.HealthStub(hog)
        streams = [hog_health.Watch(health_pb2.HealthCheckRequest(), timeout=60) for _ in range(STREAM_SLOTS)]
        for stream in streams:  # each has its slot once its first status arrived
            assert next(stream).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as refused:  # the hog's next stream: over its share
            next(hog_health.Watch(health_pb2.HealthCheckRequest(), timeout=10))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        channel, mine = watch(server.address)  # another caller, every slot taken by the hog
        held.append((channel, mine))
        assert next(mine).status == health_pb2.HealthCheckResponse.SERVING
        check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        deadline = time.monotonic() + 10  # the hog's oldest stream (as the server saw them) made room
        while all(stream.is_active() for stream in streams) and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = [stream for stream in streams if not stream.is_active()]
        assert len(ended) == 1, f"{len(ended)} of the hog's streams ended, not one"
        assert ended[0].code() == grpc.StatusCode.CANCELLED

        for _ in range(3):  # the hog cannot take it back
            with pytest.raises(grpc.RpcError) as again:
                next(hog_health.Watch(health_pb2.HealthCheckRequest(), timeout=10))
            assert again.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert mine.is_active(), "the other caller's Watch was taken back"
    finally:
        for channel, stream in held:
            stream.cancel()
            channel.close()
        hog.close()
