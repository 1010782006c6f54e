"""kill -9 in the middle of work, then restart on the same data directory.

``petlab-server serve`` runs as a real subprocess. It is killed with SIGKILL in the middle of a key
upload (half sent) and in the middle of a classification; after each restart every completed
registration is still there and usable, and no staging file remains.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from petlab.client.knn_client import make_channel
from petlab.crypto.knn.deployment import KnnClient
from petlab.experiments.server_process import ServerProcess
from petlab.protos import knn_pb2, knn_pb2_grpc

CHUNK = 1 << 20

pytestmark = pytest.mark.slow


IRIS = ["--model", "iris", "--n", "6", "--k", "3", "--algorithm", "fast", "--grace", "1"]


def start_server(work: Path) -> ServerProcess:
    """``petlab-server serve`` for Iris (n = 6) in ``work`` (data ``work/data``, log
    ``work/server.log``, kept across restarts), on a free loopback port."""
    return ServerProcess(work, IRIS, start_seconds=240)


def kill9(server: ServerProcess) -> None:
    os.kill(server.pid, signal.SIGKILL)
    assert server.process.wait(30) == -signal.SIGKILL


def upload(stub, data: bytes, model: str = "iris", pause: threading.Event | None = None):
    digest = hashlib.sha256(data).hexdigest()

    def chunks():
        for offset in range(0, len(data), CHUNK):
            if offset == 0:
                yield knn_pb2.KeyChunk(model=model, total_size=len(data), sha256=digest, data=data[:CHUNK])
            else:
                if pause is not None:
                    pause.wait(60)  # hold the upload open, half sent
                yield knn_pb2.KeyChunk(data=data[offset : offset + CHUNK])

    return chunks()


def staging_files(data_dir: Path) -> list[Path]:
    return [*data_dir.glob("keys/.upload-*"), *data_dir.glob("models/.staging-*"), *data_dir.rglob("*.tmp")]


def test_kill_9_during_upload_and_classification_loses_no_registration(tmp_path):
    data_dir = tmp_path / "data"
    server = start_server(tmp_path)
    try:
        with make_channel(server.address) as channel:
            stub = knn_pb2_grpc.KnnServiceStub(channel)
            specs = stub.GetClientSpecs(knn_pb2.GetClientSpecsRequest(model="iris"), timeout=30)
            client = KnnClient(specs.client_specs)
            client.generate_keys()
            keys = client.evaluation_keys_bytes()
            assert len(keys) > 2 * CHUNK  # so an upload can be caught half-way
            completed = stub.RegisterKeys(upload(stub, keys), timeout=120).key_id

            # kill -9 while a second upload has streamed its first chunk (the server holds an
            # upload in memory until its last chunk, then stores it)
            pause = threading.Event()
            half = stub.RegisterKeys.future(upload(stub, keys, pause=pause), timeout=120)
            time.sleep(1.0)
            assert not half.done(), "the half-sent upload was answered"
            kill9(server)
            pause.set()
            with pytest.raises(grpc.RpcError):
                half.result(timeout=30)

        server = start_server(tmp_path)
        assert not staging_files(data_dir)
        assert sorted(p.stem for p in data_dir.glob("keys/*.bin")) == [completed]
        query = client.encrypt(np.array([1, 2, 3, 4]))
        with make_channel(server.address) as channel:
            stub = knn_pb2_grpc.KnnServiceStub(channel)
            request = knn_pb2.ClassifyRequest(model="iris", key_id=completed, encrypted_query=query)
            started = time.perf_counter()
            answer = stub.Classify(request, timeout=120).encrypted_class
            expected, seconds = client.decrypt_class(answer), time.perf_counter() - started
            # kill -9 while a classification is in flight (sent, not answered)
            running = stub.Classify.future(request, timeout=120)
            time.sleep(min(0.2, seconds / 4))
            in_flight = not running.done()
            kill9(server)
            with pytest.raises(grpc.RpcError):
                running.result(timeout=30)
            assert in_flight

        server = start_server(tmp_path)
        assert not staging_files(data_dir)
        with make_channel(server.address) as channel:
            stub = knn_pb2_grpc.KnnServiceStub(channel)
            assert client.decrypt_class(stub.Classify(request, timeout=120).encrypted_class) == expected
    finally:
        server.stop()
