"""Fair shares between callers, through a real ``petlab-server`` process.

One server (``iris``, n = 6, the fast family), one set of keys made once and registered twice (the
flooder's key id and the device's: anonymous callers share the key store), on loopback:

* an anonymous caller floods ``Classify`` from 6 threads on its own connection, then on six; a
  device beside it (``KnnRemote``, its ordinary retries on the ``retry-after-s`` hint) must get its
  class within a bound (without fair shares it waited 57 s); ``measure_flood`` gives the figures,
  the test prints them;
* six callers flood ``ClassifyBatch`` with batches of 64 junk queries, or ``Classify`` with junk
  queries under their valid key id and a deadline of 10^6 s: the device's class within the bound
  (a batch takes one turn per query, and a junk query's turn ends at its check);
* one caller opens as many health ``Watch`` streams as its connection allows; another caller's
  ``Watch`` opens at once and its ``Check`` answers;
* Ctrl-C (SIGINT) ends a server that has served a classification within ``--grace`` + 5 s, with
  status 130.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
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
from petlab.crypto.knn.wire_format import WireFormat
from petlab.experiments.server_process import SERVER, ServerProcess
from petlab.protos import knn_pb2, knn_pb2_grpc

FLOOD_THREADS = 6
STREAMS_PER_CONNECTION = 100  # the server's default
DEVICE_BOUND = 20.0  # seconds for the device's class under the flood (57 s without fair shares)

pytestmark = pytest.mark.slow


def fair_share_server(directory: Path) -> ServerProcess:
    """One ``petlab-server serve`` process on a free loopback port, stopped by ``stop``."""
    flags = ["--grace", "1", "--model", "iris", "--n", "6", "--k", "3", "--algorithm", "fast"]
    return ServerProcess(directory, flags)


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


def junk_queries(query: bytes, count: int, seed: int = 0) -> list[bytes]:
    """``count`` queries of ``query``'s length with random bytes: each fails its check."""
    rng = np.random.default_rng(seed)
    return [rng.bytes(len(query)) for _ in range(count)]


def flood(
    address: str,
    key_id: str,
    query: bytes,
    stop: threading.Event,
    connections: int = 1,
    kind: str = "valid",
) -> tuple[list, Counter]:
    """``FLOOD_THREADS`` threads sending on ``connections`` connections until ``stop`` (retrying at
    once when refused): ``Classify`` with a valid query (``valid``), a junk query under the valid
    key id and a 10^6 s deadline (``junk``), or ``ClassifyBatch`` of 64 junk queries (``batch``);
    returns the channels, the threads and a tally by status."""
    channels = [own_connection(address) for _ in range(connections)]
    stubs = [knn_pb2_grpc.KnnServiceStub(channel) for channel in channels]
    tally: Counter = Counter()
    junk = junk_queries(query, 64)
    calls = {
        "valid": lambda stub: stub.Classify(
            knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=query), timeout=60
        ),
        "junk": lambda stub: stub.Classify(
            knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=junk[0]), timeout=1e6
        ),
        "batch": lambda stub: stub.ClassifyBatch(
            knn_pb2.ClassifyBatchRequest(model="iris", key_id=key_id, encrypted_queries=junk), timeout=1e6
        ),
    }
    call = calls[kind]

    def attack(stub) -> None:
        while not stop.is_set():
            try:
                call(stub)
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


def flooded_device(
    server, device, prepared, flooder_key, query, connections, kind: str = "valid"
) -> tuple[float, int, Counter]:
    """The device's seconds for its class beside a flood of ``kind`` on ``connections``
    connections, the class (-1: none in its patience), the flood's tally."""
    features = np.array([5.9, 3.0, 5.1, 1.8])
    stop = threading.Event()
    (channels, *threads), tally = flood(server.address, flooder_key, query, stop, connections, kind)
    try:
        settle = time.monotonic() + 30  # the flood is answered before the device asks
        while sum(tally.values()) < FLOOD_THREADS and time.monotonic() < settle:
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
        assert tally["OK"] >= 1, "the flood was never served: it contended with nothing"
        assert flooded < DEVICE_BOUND, f"the device waited {flooded:.1f} s beside {connections} connection(s)"
        assert got == expected


def test_a_device_classifies_beside_batch_and_junk_floods(server, tmp_path):
    """Six callers (one connection each) flooding batches of 64 junk queries, then junk queries
    under a valid key id with a 10^6 s deadline: the device's class within the bound."""
    device, prepared, flooder_key = keyed_devices(server.address, tmp_path / "cache")
    features = np.array([5.9, 3.0, 5.1, 1.8])
    expected = device.classify(prepared, features)
    query = prepared.encrypt_levels(prepared.quantizer.transform(features))
    device.timeout = 2 * DEVICE_BOUND
    try:
        for kind in ("batch", "junk"):
            flooded, got, tally = flooded_device(
                server, device, prepared, flooder_key, query, FLOOD_THREADS, kind
            )
            print(f"\nbeside a {kind} flood on {FLOOD_THREADS} connections: {flooded:.2f} s ({dict(tally)})")
            assert tally["INVALID_ARGUMENT"] >= 1, "the junk was never checked"
            assert flooded < DEVICE_BOUND, f"the device waited {flooded:.1f} s beside the {kind} flood"
            assert got == expected
    finally:
        device.channel.close()


def test_ctrl_c_ends_a_server_that_has_classified_and_is_evaluating(tmp_path):
    """SIGINT after a classification, with a batch of queries in evaluation: the process ends
    within --grace + 5 s, status 130. concrete's runtime has started by then (and installed its
    own SIGINT handler, which ends the process with SIGKILL, status -9): the signal must reach
    the server's own taker all the same (``server.common.stop_signals``)."""
    server = fair_share_server(tmp_path / "server")
    try:
        channel = own_connection(server.address)
        device = KnnRemote(channel, "device", cache_dir=tmp_path / "cache", timeout=120, show_progress=False)
        prepared = device.prepare("iris")
        device.classify(prepared, np.array([5.1, 3.5, 1.4, 0.2]))
        rows = np.tile(np.array([[5.1, 3.5, 1.4, 0.2]]), (8, 1))

        def evaluate() -> None:
            with contextlib.suppress(grpc.RpcError):  # cut short by the stop
                device.classify_batch(prepared, rows)

        batch = threading.Thread(target=evaluate)
        batch.start()
        time.sleep(1.0)  # the batch is on the server's pool, its first queries evaluating
        server.signal(signal.SIGINT)
        assert server.process.wait(timeout=1 + 5.0) == 130
        batch.join(30)
        channel.close()
    finally:
        server.kill()


def watch(address: str) -> tuple[grpc.Channel, grpc.Future]:
    channel = own_connection(address)
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=60)
    return channel, stream


def test_one_caller_with_every_stream_of_its_connection_leaves_others_served(server):
    """A caller holds as many health ``Watch`` streams as its connection may carry; another
    caller's ``Watch`` opens at once and its ``Check`` answers."""
    hog = own_connection(server.address)
    held: list[tuple[grpc.Channel, grpc.Future]] = []
    try:
        hog_health = health_pb2_grpc.HealthStub(hog)
        streams = [
            hog_health.Watch(health_pb2.HealthCheckRequest(), timeout=60)
            for _ in range(STREAMS_PER_CONNECTION)
        ]
        for stream in streams:  # each open once its first status arrived
            assert next(stream).status == health_pb2.HealthCheckResponse.SERVING
        channel, mine = watch(server.address)
        held.append((channel, mine))
        began = time.monotonic()
        assert next(mine).status == health_pb2.HealthCheckResponse.SERVING
        check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        assert time.monotonic() - began < 2.0
        for stream in streams:
            stream.cancel()
    finally:
        for channel, stream in held:
            stream.cancel()
            channel.close()
        hog.close()


HOSTILE_HOLD = 2.0  # seconds each hostile upload holds its slot before it lets go and re-takes one


def test_a_device_gets_the_next_upload_slot_before_callers_that_keep_retaking_them(server):
    """Two callers (a connection each) hold both upload slots with uploads that send nothing for
    2 s, and take a slot again the moment theirs ends. A device asks once meanwhile (its first
    chunk, then the end of its stream): it must get the next slot released, ahead of them, so its
    upload is admitted (then refused as incomplete: INVALID_ARGUMENT) within the hold + 2 s.
    With fail-fast upload slots it was refused at once, and on every retry the hostile callers,
    asking again at once, had re-taken the slots first (measured: a fresh ``petlab-client
    classify`` refused for its whole 90 s patience beside three such uploaders)."""
    with own_connection(server.address) as probe:
        specs = knn_pb2_grpc.KnnServiceStub(probe).GetClientSpecs(
            knn_pb2.GetClientSpecsRequest(model="iris"), timeout=30
        )
    key_bytes = WireFormat.from_specs(specs.client_specs).key_bytes
    stop, tally = threading.Event(), Counter()

    def hostile() -> None:
        with own_connection(server.address) as channel:
            stub = knn_pb2_grpc.KnnServiceStub(channel)

            def nothing() -> Iterator[knn_pb2.KeyChunk]:
                stop.wait(HOSTILE_HOLD)
                yield from ()

            while not stop.is_set():
                try:
                    stub.RegisterKeys(nothing(), timeout=30)
                except grpc.RpcError as exc:
                    tally[exc.code().name] += 1
                    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        stop.wait(0.01)

    threads = [threading.Thread(target=hostile, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        settle = time.monotonic() + 10
        while sum(tally.values()) < 2 and time.monotonic() < settle:  # each has held a slot once
            time.sleep(0.01)
        time.sleep(0.3)  # and holds one again
        first = knn_pb2.KeyChunk(model="iris", total_size=key_bytes, sha256="0" * 64, data=b"\0")
        with own_connection(server.address) as channel:
            began = time.monotonic()
            try:
                knn_pb2_grpc.KnnServiceStub(channel).RegisterKeys(iter([first]), timeout=30)
                code = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                code = exc.code()
            waited = time.monotonic() - began
    finally:
        stop.set()
        for thread in threads:
            thread.join(HOSTILE_HOLD + 30)
    print(f"\nthe device's upload beside two slot takers: {code.name} after {waited:.1f} s ({dict(tally)})")
    assert tally["INVALID_ARGUMENT"] >= 2, "the hostile uploads never held a slot"
    assert code != grpc.StatusCode.RESOURCE_EXHAUSTED, "the device was refused while others re-took the slots"
    assert waited < HOSTILE_HOLD + 2.0


def test_ctrl_c_while_the_model_compiles_ends_the_server_with_status_130(tmp_path):
    """SIGINT while ``petlab-server serve`` compiles its model (a fresh data directory): the process
    ends within 5 s with the interrupted status 130. concrete's native libraries install their own
    SIGINT handlers while it compiles (which end the process with SIGKILL, status -9); the server
    takes the stop signals on a thread of its own (``server.common.stop_signals``)."""
    log = tmp_path / "server.log"
    flags = ["--grace", "1", "--model", "iris", "--n", "6", "--k", "3", "--algorithm", "fast"]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(SERVER), "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), *flags],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while b"compiling model" not in log.read_bytes():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=5.0) == 130, log.read_text()[-2000:]
    finally:
        process.kill()
        process.wait(30)
