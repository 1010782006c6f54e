"""A foreign key set is refused, never run (issue 23), through ``petlab-server serve`` as a real
process (Iris, n = 6, the fast circuit, with the analysis controller).

The attacks the issue reproduced: evaluation keys that deserialize but belong to another circuit,
uploaded for ``iris`` with a valid warm-up query encrypted under iris's own client specs, used to
kill the process (SIGSEGV) and the controller with it. Here real keys of another n (Iris, n = 10)
and of another data set (Wine) are uploaded, as they are and padded to the model's expected size;
queries whose payload is cut into blobs other than concrete's own (which kill concrete as well) are
sent; and another circuit's keys are planted in the key store before a restart. Each is answered
INVALID_ARGUMENT (or forgotten at start), and the server, its controller and a genuine
classification keep working. With the checks switched off the server process dies.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from petlab.client.knn_client import make_channel
from petlab.crypto.knn.deployment import KnnClient
from petlab.crypto.knn.families import classify_clear
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.wire_format import SCHEMA
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc, knn_pb2, knn_pb2_grpc
from petlab.server.knn.datasets import load_bundled
from petlab.server.knn.key_store import KeyStore
from petlab.server.knn.key_warmup import WarmupStore

pytestmark = pytest.mark.slow

SERVER = Path(sys.executable).with_name("petlab-server")
CHUNK = 1 << 20
FOREIGN = {
    "another n (Iris, n = 10)": ("iris", KnnSettings(n=10, k=3)),
    "another data set (Wine, n = 6)": ("wine", KnnSettings(n=6, k=3)),
}


class Server:
    """One ``petlab-server serve`` process (Iris n = 6 and the controller) on a free loopback port."""

    def __init__(self, data_dir: Path):
        self.data_dir, self.log = data_dir, data_dir.parent / "server.log"
        port_file = data_dir.parent / "port"
        port_file.unlink(missing_ok=True)
        command = [str(SERVER), "serve", "--port", "0", "--port-file", str(port_file)]
        command += ["--data-dir", str(data_dir), "--model", "iris", "--n", "6", "--k", "3", "--grace", "1"]
        command += ["--analysis-data", str(acs_sample_path()), "--open-analysis"]
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"petlab-server did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        self.channel = make_channel(f"127.0.0.1:{port_file.read_text().strip()}")
        self.knn = knn_pb2_grpc.KnnServiceStub(self.channel)

    def assert_serving(self) -> None:
        """The process lives, and the k-NN service and the controller answer."""
        assert self.process.poll() is None, f"petlab-server died ({self.process.returncode})"
        assert self.knn.ListModels(knn_pb2.ListModelsRequest(), timeout=30).models
        controller = controller_pb2_grpc.AnalysisControllerStub(self.channel)
        assert controller.Describe(controller_pb2.DescribeRequest(), timeout=30).controller_id

    def stop(self) -> None:
        self.channel.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("foreign-keys") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def specs(server) -> knn_pb2.GetClientSpecsResponse:
    return server.knn.GetClientSpecs(knn_pb2.GetClientSpecsRequest(model="iris"), timeout=30)


@pytest.fixture(scope="module")
def own(specs) -> KnnClient:
    """A genuine client of the served model (its keys made from the server's specs)."""
    client = KnnClient(specs.client_specs)
    client.generate_keys()
    return client


def chunks(data: bytes, warmup: bytes, model: str = "iris"):
    digest = hashlib.sha256(data).hexdigest()
    yield knn_pb2.KeyChunk(
        model=model, total_size=len(data), sha256=digest, data=data[:CHUNK], warmup_query=warmup
    )
    for offset in range(CHUNK, len(data), CHUNK):
        yield knn_pb2.KeyChunk(data=data[offset : offset + CHUNK])


def refused(call, *args) -> str:
    with pytest.raises(grpc.RpcError) as failure:
        call(*args, timeout=120)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT, failure.value.details()
    return failure.value.details()


def recut(ciphertext: bytes) -> bytes:
    """The same ciphertext, its payload cut into two blobs (concrete writes one)."""
    with SCHEMA.Value.from_bytes(ciphertext) as reader:
        value = reader.as_builder()
    payload = b"".join(bytes(blob) for blob in value.payload.data)
    blobs = value.payload.init("data", 2)
    blobs[0], blobs[1] = payload[:8], payload[8:]
    return value.to_bytes()


@pytest.mark.parametrize("name", FOREIGN)
def test_a_foreign_key_set_is_refused_never_run(server, own, keyed_model, name):
    """Real keys of another circuit with a valid warm-up query made under iris's own specs: refused
    as sent (the announced size is not iris's) and padded to iris's size (the key set itself),
    and nothing was stored; the server and its controller keep serving."""
    _, foreign = keyed_model(*FOREIGN[name])
    keys, warmup = foreign.evaluation_keys_bytes(), own.encrypt(np.zeros(4, dtype=np.int64))
    stored = sorted(server.data_dir.glob("keys/*.bin"))
    assert "bytes; the upload announces" in refused(server.knn.RegisterKeys, chunks(keys, warmup))
    expected = len(own.evaluation_keys_bytes())
    if len(keys) < expected:  # padded: concrete reads a key set with trailing bytes
        padded = keys + bytes(expected - len(keys))
        assert "framing" in refused(server.knn.RegisterKeys, chunks(padded, warmup))
    assert sorted(server.data_dir.glob("keys/*.bin")) == stored
    server.assert_serving()


def test_queries_in_another_layout_are_refused_and_genuine_ones_answered(server, own, keyed_model):
    """A warm-up query and a query whose payload is cut in two (each killed concrete), and a query
    of another data set: INVALID_ARGUMENT. Then a genuine query is classified as in the clear."""
    zeros = own.encrypt(np.zeros(4, dtype=np.int64))
    keys = own.evaluation_keys_bytes()
    assert "warm-up query does not fit" in refused(server.knn.RegisterKeys, chunks(keys, recut(zeros)))
    key_id = server.knn.RegisterKeys(chunks(keys, zeros), timeout=300).key_id
    _, wine = keyed_model(*FOREIGN["another data set (Wine, n = 6)"])
    for query in (recut(zeros), wine.encrypt(np.zeros(13, dtype=np.int64))):
        request = knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=query)
        assert "bad encrypted query" in refused(server.knn.Classify, request)
    batch = knn_pb2.ClassifyBatchRequest(model="iris", key_id=key_id, encrypted_queries=[zeros, recut(zeros)])
    refused(server.knn.ClassifyBatch, batch)
    server.assert_serving()

    train, test = load_bundled("iris").split()
    model = build_model("iris", train.features, train.labels, KnnSettings(n=6, k=3), train.class_names)
    levels = model.quantizer.transform(test.features[:1])
    request = knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=own.encrypt(levels[0]))
    answer = server.knn.Classify(request, timeout=300).encrypted_class
    assert own.decrypt_class(answer) == int(classify_clear(model.plan, levels)[0])


def test_foreign_keys_planted_in_the_store_are_dropped_at_restart(server, own, specs, keyed_model):
    """Another circuit's keys in the store under iris's tag (a store written before these checks,
    or altered on disk), with a warm-up query: the restarted server prepares stored keys before its
    port opens, and used to run them. It forgets them, starts, and answers their id as unknown."""
    server.stop()
    _, foreign = keyed_model(*FOREIGN["another n (Iris, n = 10)"])
    keys = foreign.evaluation_keys_bytes()
    store = KeyStore(server.data_dir / "keys", 1 << 30, 3600.0)
    tag = f"iris@{specs.specs_sha256[:16]}"
    planted = store.put(tag, "planted", len(keys), hashlib.sha256(keys).hexdigest(), [keys]).key_id
    store.mark_used(planted)  # the most recently used: the first prepared at start
    store.close()
    WarmupStore(server.data_dir / "warmup").put(planted, own.encrypt(np.zeros(4, dtype=np.int64)))
    restarted = Server(server.data_dir)
    server.__dict__.update(restarted.__dict__)  # the module's fixture now stands for the new process
    restarted.assert_serving()
    assert f"stored key {planted} not prepared (forgotten)" in restarted.log.read_text()
    request = knn_pb2.ClassifyRequest(
        model="iris", key_id=planted, encrypted_query=own.encrypt(np.zeros(4, dtype=np.int64))
    )
    with pytest.raises(grpc.RpcError) as failure:
        restarted.knn.Classify(request, timeout=60)
    assert failure.value.code() == grpc.StatusCode.NOT_FOUND
    restarted.assert_serving()
