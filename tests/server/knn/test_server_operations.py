"""Server operations: TLS and mutual TLS, deadlines, graceful shutdown, call logs, configuration."""

from __future__ import annotations

import json
import logging
import threading
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tls_certificates import certificate, write_pem

from petlab.client.knn_client import KnnRemote, make_channel
from petlab.crypto.knn.model import KnnSettings
from petlab.errors import BadInput
from petlab.protos import knn_pb2, knn_pb2_grpc
from petlab.server.knn.datasets import load_csv
from petlab.server.main import parse_args


@pytest.fixture(scope="module")
def hosted(hosted_model):
    """One small compiled model (the session's, shared with test_grpc) for every server here."""
    return {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}


def test_mutual_tls(serve, hosted, tmp_path):
    ca_key, ca_cert = certificate("petlab test CA")
    _, ca_path = write_pem(tmp_path, "ca", ca_key, ca_cert)
    server_key, server_cert = certificate("localhost", ca_key, ca_cert.subject)
    server_key_path, server_cert_path = write_pem(tmp_path, "server", server_key, server_cert)
    client_key, client_cert = certificate("device-1", ca_key, ca_cert.subject)
    client_key_path, client_cert_path = write_pem(tmp_path, "client", client_key, client_cert)
    with serve(
        tmp_path / "data",
        hosted,
        host="localhost",
        tls_cert=server_cert_path,
        tls_key=server_key_path,
        tls_client_ca=ca_path,
    ) as running:
        with make_channel(f"localhost:{running.port}", ca_path, client_cert_path, client_key_path) as channel:
            models = knn_pb2_grpc.KnnServiceStub(channel).ListModels(knn_pb2.ListModelsRequest(), timeout=10)
            assert [m.name for m in models.models] == ["iris"]
        with (
            make_channel(f"localhost:{running.port}", ca_path) as no_client_cert,
            pytest.raises(grpc.RpcError),
        ):
            knn_pb2_grpc.KnnServiceStub(no_client_cert).ListModels(knn_pb2.ListModelsRequest(), timeout=10)
        with make_channel(f"localhost:{running.port}") as plaintext, pytest.raises(grpc.RpcError):
            knn_pb2_grpc.KnnServiceStub(plaintext).ListModels(knn_pb2.ListModelsRequest(), timeout=5)


@pytest.mark.slow
def test_deadline_and_graceful_shutdown(serve, hosted, tmp_path, caplog):
    with serve(tmp_path, hosted) as running:  # the test stops it itself, below
        channel = make_channel(f"127.0.0.1:{running.port}")
        remote = KnnRemote(channel, "ops", tmp_path / "client", timeout=300, show_progress=False)
        prepared = remote.prepare("iris")
        stub = knn_pb2_grpc.KnnServiceStub(channel)
        query = prepared.client.encrypt(np.zeros(4, dtype=np.int64))
        request = knn_pb2.ClassifyRequest(model="iris", key_id=prepared.key_id, encrypted_query=query)
        with pytest.raises(grpc.RpcError) as failure:
            stub.Classify(request, timeout=0.001)
        assert failure.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

        caplog.set_level(logging.INFO, logger="petlab.calls")
        outcome = {}
        batch = knn_pb2.ClassifyBatchRequest(
            model="iris", key_id=prepared.key_id, encrypted_queries=[query] * 4
        )

        def in_flight():  # four evaluations: seconds of work, so the call is surely running below
            outcome["reply"] = stub.ClassifyBatch(batch, timeout=300)

        worker = threading.Thread(target=in_flight)
        worker.start()
        time.sleep(0.5)
        stopper = threading.Thread(target=running.stop, kwargs={"grace": 120})
        stopper.start()
        time.sleep(0.2)
        health = health_pb2_grpc.HealthStub(channel)
        try:  # NOT_SERVING first, then no new calls at all
            status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
        except grpc.RpcError:
            status = None
        assert status in (None, health_pb2.HealthCheckResponse.NOT_SERVING)
        assert worker.is_alive()  # still draining the in-flight batch
        worker.join(timeout=300)
        stopper.join(timeout=300)
        answers = [prepared.client.decrypt_class(r) for r in outcome["reply"].encrypted_classes]
        assert len(answers) == 4 and len(set(answers)) == 1
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "petlab.calls"]
        batch_lines = [line for line in lines if line["method"] == "ClassifyBatch"]
        assert [line["status"] for line in batch_lines] == ["OK"]
        assert batch_lines[0]["model"] == "iris" and batch_lines[0]["bytes_in"] == batch.ByteSize()
        assert batch_lines[0]["bytes_out"] == outcome["reply"].ByteSize() and batch_lines[0]["latency_ms"] > 0
        channel.close()


def test_flags_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PETLAB_PORT", "6001")
    monkeypatch.setenv("PETLAB_MODELS", "iris,wine")
    monkeypatch.setenv("PETLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PETLAB_KEY_CAP_MB", "10")
    options, _ = parse_args(["serve"])
    assert (options.common.port, options.knn.models, options.data_dir) == (6001, ["iris", "wine"], tmp_path)
    assert options.knn.key_cap_bytes == 10 << 20
    assert not options.common.allow_insecure
    options, _ = parse_args(["serve", "--port", "7000", "--model", "digits"])
    assert (options.common.port, options.knn.models) == (7000, ["digits"])
    for value, expected in (("1", True), ("YES", True), ("true", True), ("0", False), ("no", False)):
        monkeypatch.setenv("PETLAB_ALLOW_INSECURE", value)
        assert parse_args(["serve"])[0].common.allow_insecure is expected
    monkeypatch.setenv("PETLAB_ALLOW_INSECURE", "maybe")
    with pytest.raises(BadInput, match="PETLAB_ALLOW_INSECURE"):
        parse_args(["serve"])


def test_csv_training_data(tmp_path):
    path = tmp_path / "owner.csv"
    path.write_text("a,b,label\n1,2,yes\n3,4,no\n5,6,yes\n")
    data = load_csv(path)
    assert data.class_names == ("no", "yes") and data.labels.tolist() == [1, 0, 1]
    assert data.feature_names == ("a", "b")
    path.write_text("a,b,kind\n1,2,yes\n")
    with pytest.raises(ValueError, match="no label column 'label'"):
        load_csv(path)
    path.write_text("a,b,label\n1,x,yes\n")
    with pytest.raises(ValueError, match="must be numeric"):
        load_csv(path)


@pytest.mark.parametrize("room", [".", "keys", "warmup"])
def test_a_data_directory_others_can_write_is_refused_at_start(serve, hosted, tmp_path, room):
    """An existing data, key or warm-up directory that another user could write to (where a link
    or a file could be planted for the server to follow or load) stops the server at start."""
    data = tmp_path / "data"
    (data / room).mkdir(parents=True, mode=0o700, exist_ok=True)
    data.chmod(0o700)
    (data / room).chmod(0o777)
    with pytest.raises(ValueError, match="writable by other users"), serve(data, hosted):
        pass


def test_default_key_caps_follow_the_model_key_size(serve, hosted, tmp_path):
    """The store cannot be held by a handful of owners: by default it makes room for --key-owners
    (16) owners, each with --owner-max-keys (4) key sets of the largest model's size, and an owner's
    quota is exactly its key sets."""
    tokens = tmp_path / "tokens"
    tokens.write_text("alice alice-token-0123456789abcdef\n")
    tokens.chmod(0o600)
    largest = hosted["iris"].key_size_window[1]
    with serve(tmp_path / "data", hosted, tokens=tokens) as running:
        assert running.keys.quota is not None and running.keys.quota.max_bytes == 4 * largest
        assert running.keys.max_bytes == 16 * 4 * largest
    with serve(tmp_path / "data2", hosted, tokens=tokens, key_owners=3, owner_max_keys=2) as running:
        assert running.keys.quota is not None and running.keys.quota.max_bytes == 2 * largest
        assert running.keys.max_bytes == 3 * 2 * largest
    options, _ = parse_args(["serve", "--key-owners", "5"])
    knn = options.knn
    assert (knn.key_owners, knn.key_cap_bytes, knn.owner_cap_bytes) == (5, None, None)
