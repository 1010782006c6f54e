"""Encrypted k-NN evaluations on a real LocalCluster (2 worker processes, 1 thread each) behind the
gRPC front end: the same answers as in process, a worker killed mid-evaluation costs a retry and
not the answer, and health follows the cluster's workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.addresses import is_loopback_host
from petlab.client.knn_client import KnnRemote, make_channel
from petlab.crypto.knn.families import classify_clear
from petlab.crypto.knn.model import KnnSettings
from petlab.dask_cluster import ClusterSpec, DaskCluster
from petlab.server.knn.cluster_evaluation import worker_cache_info
from petlab.server.knn.datasets import load_bundled
from petlab.server.knn.service import key_tag
from petlab.server.main import parse_args

SETTINGS = KnnSettings(n=6, k=3, bits=4, algorithm="fast")  # shared with test_grpc
KNN = "petlab.knn.v1.KnnService"


@pytest.fixture(scope="module")
def hosted(hosted_model):
    return {"iris": hosted_model("iris", SETTINGS)}


@pytest.fixture(scope="module")
def before(local_cluster) -> dict:
    """Each worker's cache counters before this module's server: the session's cluster may have
    served other modules' models first (the counters are per worker process, cumulative)."""
    return local_cluster.client.run(worker_cache_info)


@pytest.fixture(scope="module")
def running(serve, hosted, local_cluster, tmp_path_factory, before):
    address = local_cluster.client.scheduler.address
    with serve(
        tmp_path_factory.mktemp("cluster-server"), hosted, cluster=ClusterSpec(address=address)
    ) as server:
        yield server


@pytest.fixture(scope="module")
def remote(running, tmp_path_factory):
    with make_channel(f"127.0.0.1:{running.port}") as channel:
        yield KnnRemote(
            channel, "cluster", tmp_path_factory.mktemp("client"), timeout=300, show_progress=False
        )


@pytest.fixture(scope="module")
def prepared(remote):
    return remote.prepare("iris")  # uploads the keys; the warm-up query runs on the cluster


@pytest.fixture(scope="module")
def rows():
    return load_bundled("iris").split()[1].features


def reference(running, rows) -> list[int]:
    model = running.hosted["iris"].model
    return classify_clear(model.plan, model.quantizer.transform(rows)).tolist()


def health_status(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=KNN), timeout=5).status


@pytest.mark.slow
def test_cluster_answers_equal_in_process_answers(running, remote, prepared, rows, local_cluster, before):
    single = [remote.classify(prepared, row) for row in rows[:2]]
    batch = remote.classify_batch(prepared, rows[1:4])
    expected = reference(running, rows[:4])  # what the in-process evaluation answers (test_grpc)
    assert single == expected[:2] and batch == expected[1:]
    after = local_cluster.client.run(worker_cache_info)
    info = {
        worker: {
            name: after[worker][name] - before.get(worker, {}).get(name, 0)
            for name in ("models", "keys", "evaluations")
        }
        for worker in after
    }
    assert sum(i["evaluations"] for i in info.values()) >= 6  # warm-up, 2 single, 3 batched
    # each worker loaded the model at most once and deserialised this client's keys at most once,
    # and the key bytes left the front end once for all six evaluations
    assert all(i["models"] <= 1 and i["keys"] <= 1 for i in info.values()), info
    assert running.cluster.key_scatters == 1
    assert running.cluster.in_flight() == {}  # every evaluation counted as done once answered


@pytest.mark.slow
def test_killed_worker_costs_a_retry_not_the_answer(running, remote, prepared, rows, local_cluster):
    client = local_cluster.client
    before = set(client.scheduler_info(n_workers=-1)["workers"])
    queries = rows[10:16]
    answers: list[int] = []
    started = time.monotonic()
    call = threading.Thread(target=lambda: answers.extend(remote.classify_batch(prepared, queries)))
    call.start()
    victim = None
    while victim is None and time.monotonic() - started < 60:
        busy = [
            w for w, tasks in client.processing().items() if any("evaluate_on_worker" in t for t in tasks)
        ]
        victim = busy[0] if busy else None
        time.sleep(0.05)
    assert victim is not None, "no worker picked up the evaluations"
    pid = client.run(os.getpid, workers=[victim])[victim]
    time.sleep(0.2)  # mid-evaluation
    os.kill(pid, signal.SIGKILL)
    call.join(timeout=300)
    assert answers == reference(running, queries)  # answered, and right, within the call's timeout
    after = set(client.scheduler_info(n_workers=-1)["workers"])
    assert victim in before and victim not in after  # the worker did die
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it for the next tests


@pytest.mark.slow
def test_the_deadline_holds_on_the_cluster(running, remote, prepared, rows):
    from petlab.server.knn.evaluators import Evaluation, EvaluationTimedOut

    remote.classify(prepared, rows[0])  # the key id is registered on this server
    query = prepared.client.encrypt(prepared.quantizer.transform(rows[:1].astype(float))[0])
    path = running.keys.locate(prepared.key_id, key_tag(running.hosted["iris"]))
    with pytest.raises(EvaluationTimedOut):  # no time left: cancelled, never waited for
        running.cluster.classify(Evaluation("iris", prepared.key_id, path, [query], timeout=0.0))
    (answer,) = running.cluster.classify(Evaluation("iris", prepared.key_id, path, [query], timeout=300.0))
    assert prepared.client.decrypt_class(answer) == reference(running, rows[:1])[0]


def test_health_is_not_serving_without_workers(serve, hosted, tmp_path):
    from distributed import LocalCluster

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as empty,
        serve(tmp_path, hosted, cluster=ClusterSpec(address=empty.scheduler_address)) as running,
    ):
        assert health_status(running.port) == health_pb2.HealthCheckResponse.NOT_SERVING  # from the start
        deadline = time.monotonic() + 30
        empty.scale(1)
        while health_status(running.port) != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_cluster_flags(monkeypatch, tmp_path):
    options, _ = parse_args(["serve", "--data-dir", str(tmp_path), "--local-workers", "2"])
    assert options.knn.cluster == ClusterSpec(local_workers=2)
    monkeypatch.setenv("PETLAB_CLUSTER", "tls://scheduler:8786")
    options, _ = parse_args(["serve", "--data-dir", str(tmp_path)])
    assert options.knn.cluster == ClusterSpec(address="tls://scheduler:8786") and options.knn.cluster.enabled
    with pytest.raises(SystemExit):
        parse_args(["serve", "--data-dir", str(tmp_path), "--local-workers", "2"])  # and the variable
    monkeypatch.delenv("PETLAB_CLUSTER")
    assert not parse_args(["serve", "--data-dir", str(tmp_path)])[0].knn.cluster.enabled


def test_default_path_does_not_import_dask():
    code = (
        "import sys, petlab.server.main, petlab.plaindata.cli, petlab.server.knn.service; "
        "print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_rendezvous_order_moves_only_a_gone_workers_keys():
    from petlab.server.knn.cluster_evaluation import home_worker, rendezvous_order

    workers = [f"tcp://10.0.0.{i}:9000" for i in range(5)]
    keys = [f"{i:064x}" for i in range(200)]
    homes = {k: home_worker(k, workers) for k in keys}
    assert len(set(homes.values())) == 5  # spread over every worker
    gone = workers[2]
    for key in keys:
        order = rendezvous_order(key, workers)
        assert sorted(order) == sorted(workers) and order[0] == homes[key]
        after = rendezvous_order(key, [w for w in workers if w != gone])
        assert after == [w for w in order if w != gone]  # the rest keep their places


def test_the_embedded_cluster_listens_on_loopback_only(local_cluster):
    """Every socket the LocalCluster's processes (and this one) listen on is a loopback one: its
    scheduler, workers, nannies and, where bokeh is installed, its dashboard."""
    import psutil

    me = psutil.Process()
    listening = [
        (process.pid, conn.laddr.ip, conn.laddr.port)
        for process in [me, *me.children(recursive=True)]
        for conn in process.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    assert listening
    assert all(is_loopback_host(ip) for _, ip, _ in listening), listening


def test_the_embedded_cluster_runs_nothing_for_a_stranger(local_cluster):
    """Attack: Dask runs any pickled function a connected client submits. Were the embedded cluster
    to listen in plain TCP on loopback, any local user could connect and run code as the data
    owner (a plain ``Client(address)`` running ``os.getcwd`` on a worker). Its connections are
    mutual TLS under its own key pair: a client without it, plain or with another key pair, is
    not let in."""
    from distributed import Client
    from distributed.security import Security

    address = local_cluster.client.scheduler.address
    plain = address.replace("tls://", "tcp://", 1)
    for target, security in ((plain, Security()), (address, Security.temporary())):
        with pytest.raises((OSError, TimeoutError)):
            stranger = Client(target, security=security, timeout=3, set_as_default=False)
            try:
                stranger.submit(os.getcwd).result(timeout=5)
            finally:
                stranger.close()
    assert address.startswith("tls://")
    assert local_cluster.client.submit(os.getcwd).result(timeout=60)  # its own client runs


def test_the_dashboard_is_asked_for_on_loopback(monkeypatch):
    """The dashboard's address as given to Dask (bokeh is not installed here, so no dashboard
    listens in the test above): ``":0"`` would bind every interface."""
    import distributed

    given: dict = {}

    class Recorded:
        security = "the cluster's key pair"

        def __init__(self, **kwargs):
            given.update(kwargs)

        def close(self):
            pass

    monkeypatch.setattr(distributed, "LocalCluster", Recorded)
    monkeypatch.setattr(distributed, "Client", lambda cluster, **kwargs: Recorded(client=kwargs))
    DaskCluster.start(ClusterSpec(local_workers=1)).close()
    host, _, port = given["dashboard_address"].rpartition(":")
    assert is_loopback_host(host) and port == "0" and is_loopback_host(given["host"])
    assert given["security"] is True and given["client"]["security"] == Recorded.security
