"""A foreign key set is refused, never run, through ``petlab-server serve`` as a real
process (Iris, n = 6, the fast circuit, with the analysis controller).

The attacks: evaluation keys that deserialize but belong to another circuit, uploaded for
``iris`` with a valid warm-up query encrypted under iris's own client specs, would kill the
process (SIGSEGV) and the controller with it were they run. Here real keys of another n (Iris, n = 10)
and of another data set (Wine) are uploaded, as they are and padded to the model's expected size;
queries whose payload is cut into blobs other than concrete's own (which kill concrete as well) are
sent; and another circuit's keys are planted in the key store before the server starts (it
prepares stored keys before its port opens). Each is answered INVALID_ARGUMENT (or forgotten at
start), and the server, its controller and a genuine classification keep working. With the checks
switched off the server process dies.
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
from petlab.crypto.knn.families import classify_clear, encode_query
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc, knn_pb2, knn_pb2_grpc
from petlab.server.knn.datasets import load_bundled
from petlab.server.knn.key_store import KeyStore
from petlab.server.knn.key_warmup import WarmupStore
from petlab.server.knn.options import KnnOptions
from petlab.server.knn.service import key_tag
from petlab.server.knn.startup import load_models

pytestmark = pytest.mark.slow

SERVER = Path(sys.executable).with_name("petlab-server")
CHUNK = 1 << 20
IRIS = KnnSettings(n=6, k=3)  # what the server below serves (petlab-server's defaults otherwise)
FOREIGN = {
    "another n (Iris, n = 10)": ("iris", KnnSettings(n=10, k=3)),
    "another data set (Wine, n = 6)": ("wine", KnnSettings(n=6, k=3)),
}


def encrypted_zeros(client: KnnClient, settings: KnnSettings, d: int) -> bytes:
    """The all-zero query, encoded as the family of ``settings`` wants it, encrypted."""
    return client.encrypt(encode_query(settings.algorithm, np.zeros(d, dtype=np.int64), settings.bits))


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
def planted(tmp_path_factory, keyed_model) -> tuple[Path, str, KnnClient, str]:
    """A data directory as the server will find it: iris (n = 6) compiled into its model cache
    (the server loads it from there, so its client specs are these), a genuine client of it, and
    another circuit's keys (Iris, n = 10) stored under iris's tag with a warm-up query, as a store
    written before the checks (or altered on disk) would hold them."""
    data_dir = tmp_path_factory.mktemp("foreign-keys") / "data"
    hosted = load_models(KnnOptions(models=["iris"], settings=IRIS), data_dir)
    own = KnnClient(hosted["iris"].specs)
    own.generate_keys()
    _, foreign = keyed_model(*FOREIGN["another n (Iris, n = 10)"])
    keys = foreign.evaluation_keys_bytes()
    store = KeyStore(data_dir / "keys", 1 << 30, 3600.0)
    key_id = store.put(
        key_tag(hosted["iris"]), "planted", len(keys), hashlib.sha256(keys).hexdigest(), [keys]
    ).key_id
    store.close()
    WarmupStore(data_dir / "warmup").put(key_id, encrypted_zeros(own, IRIS, 4))
    return data_dir, key_id, own, hosted["iris"].specs_sha256


@pytest.fixture(scope="module")
def server(planted):
    running = Server(planted[0])
    yield running
    running.stop()


@pytest.fixture(scope="module")
def own(planted, server) -> KnnClient:
    """A genuine client of the served model (the server serves the specs its keys were made from)."""
    served = server.knn.GetClientSpecs(knn_pb2.GetClientSpecsRequest(model="iris"), timeout=30)
    assert served.specs_sha256 == planted[3]  # the server loaded the circuit compiled above
    return planted[2]


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


@pytest.mark.parametrize("name", FOREIGN)
def test_a_foreign_key_set_is_refused_never_run(server, own, keyed_model, name):
    """Real keys of another circuit with a valid warm-up query made under iris's own specs: refused
    as sent (the announced size is not iris's) and padded to iris's size (the key set itself),
    and nothing was stored; the server and its controller keep serving."""
    _, foreign = keyed_model(*FOREIGN[name])
    keys, warmup = foreign.evaluation_keys_bytes(), encrypted_zeros(own, IRIS, 4)
    stored = sorted(server.data_dir.glob("keys/*.bin"))
    assert "bytes; the upload announces" in refused(server.knn.RegisterKeys, chunks(keys, warmup))
    expected = len(own.evaluation_keys_bytes())
    if len(keys) < expected:  # padded: concrete reads a key set with trailing bytes
        padded = keys + bytes(expected - len(keys))
        assert "framing" in refused(server.knn.RegisterKeys, chunks(padded, warmup))
    assert sorted(server.data_dir.glob("keys/*.bin")) == stored
    server.assert_serving()


def test_queries_in_another_layout_are_refused_and_genuine_ones_answered(server, own, keyed_model, recut):
    """A warm-up query and a query whose payload is cut in two (each killed concrete), and a query
    of another data set: INVALID_ARGUMENT. Then a genuine query is classified as in the clear."""
    zeros = encrypted_zeros(own, IRIS, 4)
    keys = own.evaluation_keys_bytes()
    assert "warm-up query does not fit" in refused(server.knn.RegisterKeys, chunks(keys, recut(zeros)))
    key_id = server.knn.RegisterKeys(chunks(keys, zeros), timeout=300).key_id
    _, wine = keyed_model(*FOREIGN["another data set (Wine, n = 6)"])
    for query in (recut(zeros), encrypted_zeros(wine, FOREIGN["another data set (Wine, n = 6)"][1], 13)):
        request = knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=query)
        assert "bad encrypted query" in refused(server.knn.Classify, request)
    batch = knn_pb2.ClassifyBatchRequest(model="iris", key_id=key_id, encrypted_queries=[zeros, recut(zeros)])
    refused(server.knn.ClassifyBatch, batch)
    server.assert_serving()

    train, test = load_bundled("iris").split()
    model = build_model("iris", train.features, train.labels, IRIS, train.class_names)
    levels = model.quantizer.transform(test.features[:1])
    request = knn_pb2.ClassifyRequest(
        model="iris", key_id=key_id, encrypted_query=own.encrypt(model.encode(levels[0]))
    )
    answer = server.knn.Classify(request, timeout=300).encrypted_class
    assert own.decrypt_class(answer) == int(classify_clear(model.plan, levels)[0])


def test_foreign_keys_planted_in_the_store_are_dropped_at_start(server, planted, own):
    """The server prepares the most recently used stored keys before its port opens, and used to
    run the planted ones (and die). It forgets them, starts, and answers their id as unknown."""
    key_id = planted[1]
    assert f"stored key {key_id} not prepared (forgotten)" in server.log.read_text()
    query = encrypted_zeros(own, IRIS, 4)
    with pytest.raises(grpc.RpcError) as failure:
        server.knn.Classify(
            knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=query), timeout=60
        )
    assert failure.value.code() == grpc.StatusCode.NOT_FOUND
    server.assert_serving()


def test_pointers_the_schema_does_not_list_are_never_stored(server, own, with_unlisted_pointer):
    """Attack: a key set with a root pointer concrete's schema does not list (concrete copies it
    as it reads; 8,000 such pointers aliasing the 20 MB bootstrap key fit the upload margin and
    would cost it 160 GB) is stored, and parsed, as the genuine key set exactly."""
    keys = own.evaluation_keys_bytes()
    wider = with_unlisted_pointer(keys, [bytes(4096)] * 2)
    key_id = server.knn.RegisterKeys(chunks(wider, b""), timeout=300).key_id
    assert (server.data_dir / "keys" / f"{key_id}.bin").read_bytes() == keys
    server.assert_serving()
