"""The gRPC services through real sockets on loopback, with small models to stay fast."""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.client.knn_client import KnnRemote, make_channel
from petlab.client.paillier_client import paillier_classify
from petlab.crypto.knn.families import classify_clear
from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.knn.paper.reference import classify_by_sorting
from petlab.crypto.paillier_knn import generate_keypair
from petlab.protos import knn_pb2, knn_pb2_grpc, paillier_pb2, paillier_pb2_grpc
from petlab.server.knn.datasets import load_bundled
from petlab.server.main import parse_args

SETTINGS = KnnSettings(n=6, k=3, bits=4, algorithm="fast")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("server-data")


@pytest.fixture(scope="module")
def hosted(hosted_model):
    return {name: hosted_model(name, SETTINGS) for name in ("iris", "wine")}


@pytest.fixture(scope="module")
def running(serve, data_dir, hosted):
    with serve(data_dir, hosted, key_cap_bytes=2 << 30, enable_paillier_baseline=True) as server:
        yield server


@pytest.fixture(scope="module")
def channel(running):
    with make_channel(f"127.0.0.1:{running.port}") as channel:
        yield channel


@pytest.fixture(scope="module")
def remote(channel, tmp_path_factory):
    return KnnRemote(
        channel, "test-server", tmp_path_factory.mktemp("client-cache"), timeout=300, show_progress=False
    )


@pytest.fixture(scope="module")
def iris_prepared(remote):
    return remote.prepare("iris")


@pytest.fixture(scope="module")
def held_out():
    _, test = load_bundled("iris").split()
    return test.features


def reference(running, model: str, rows: np.ndarray) -> list[int]:
    hosted = running.hosted[model].model
    return classify_clear(hosted.plan, hosted.quantizer.transform(rows)).tolist()


def exact_knn(running, model: str, rows: np.ndarray) -> list[int]:
    """Textbook k-NN on the model's n points: what the interactive Paillier protocol computes."""
    plan, quantizer = running.hosted[model].model.plan, running.hosted[model].model.quantizer
    levels = quantizer.transform(rows)
    return classify_by_sorting(plan.train, plan.labels, plan.k, plan.n_classes, levels).tolist()


def test_list_models_shows_public_information_only(remote):
    models = {m.name: m for m in remote.models()}
    assert set(models) == {"iris", "wine"}
    iris = models["iris"]
    assert (iris.d, iris.bits, list(iris.class_names)) == (4, 4, ["setosa", "versicolor", "virginica"])
    assert {f.name for f in knn_pb2.ModelInfo.DESCRIPTOR.fields}.isdisjoint({"n", "k", "train"})


@pytest.mark.slow
def test_encrypted_classification_equals_reference(running, remote, iris_prepared, held_out):
    rows = held_out[:4]
    single = [remote.classify(iris_prepared, row) for row in rows[:2]]
    batch = remote.classify_batch(iris_prepared, rows)
    expected = reference(running, "iris", rows)
    assert single == expected[:2] and batch == expected


@pytest.mark.slow
def test_secret_keys_are_cached_owner_only(iris_prepared):
    keys_file = iris_prepared.directory / "keys.bin"
    assert keys_file.stat().st_mode & 0o777 == 0o600
    assert iris_prepared.directory.stat().st_mode & 0o777 == 0o700


@pytest.mark.slow
def test_paillier_baseline_equals_reference(running, channel, remote, held_out):
    info = next(m for m in remote.models() if m.name == "iris")
    keypair = generate_keypair()
    stats = []
    answers = [paillier_classify(channel, info, row, keypair, stats, timeout=60) for row in held_out[:5]]
    assert answers == exact_knn(running, "iris", held_out[:5])
    assert [s.method for s in stats[:2]] == ["Distances", "Labels"]


@pytest.mark.slow
def test_restart_keeps_registered_keys(
    serve, data_dir, hosted, remote, iris_prepared, running, held_out, tmp_path
):
    """A server restarted on the data directory (a copy of it: the first one still holds the
    directory; keys from the store; loading models from the compile cache is tested in
    test_deployment_and_cache) accepts the key id registered with the first."""
    key_id = iris_prepared.key_id
    copy = tmp_path / "restarted"
    shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns("server.lock"))
    with (
        serve(copy, hosted, key_cap_bytes=2 << 30, enable_paillier_baseline=True) as restarted,
        make_channel(f"127.0.0.1:{restarted.port}") as channel,
    ):
        again = KnnRemote(channel, "test-server", remote.cache_dir, timeout=300, show_progress=False)
        prepared = again.prepare("iris")
        assert prepared.key_id == key_id
        assert again.classify(prepared, held_out[5]) == reference(restarted, "iris", held_out[5:6])[0]
        assert "RegisterKeys" not in [s.method for s in again.stats]
        assert restarted.prepared_keys >= 1  # stored keys prepared before the port opened


@pytest.mark.slow
def test_unknown_key_is_uploaded_again(remote, iris_prepared, running, held_out):
    running.keys.forget(iris_prepared.key_id)
    old = iris_prepared.key_id
    assert remote.classify(iris_prepared, held_out[6]) == reference(running, "iris", held_out[6:7])[0]
    assert iris_prepared.key_id != old


def expect_status(code: grpc.StatusCode, call, *args, **kwargs) -> str:
    with pytest.raises(grpc.RpcError) as failure:
        call(*args, **kwargs)
    assert failure.value.code() == code, failure.value.details()
    assert failure.value.details()
    return failure.value.details()


@pytest.mark.slow
def test_bad_requests_get_clear_statuses(channel, remote, iris_prepared, running, keyed_model):
    stub = knn_pb2_grpc.KnnServiceStub(channel)
    key = iris_prepared.key_id
    good_query = iris_prepared.client.encrypt(np.zeros(4, dtype=np.int64))
    details = expect_status(
        grpc.StatusCode.NOT_FOUND,
        stub.Classify,
        knn_pb2.ClassifyRequest(model="mnist", key_id=key, encrypted_query=good_query),
    )
    assert "iris" in details
    expect_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        stub.Classify,
        knn_pb2.ClassifyRequest(key_id=key, encrypted_query=good_query),
    )
    expect_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        stub.Classify,
        knn_pb2.ClassifyRequest(model="iris", encrypted_query=good_query),
    )
    expect_status(
        grpc.StatusCode.NOT_FOUND,
        stub.Classify,
        knn_pb2.ClassifyRequest(model="iris", key_id="0" * 32, encrypted_query=good_query),
    )
    expect_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        stub.Classify,
        knn_pb2.ClassifyRequest(model="iris", key_id=key, encrypted_query=b"\x01garbage" * 8),
    )
    expect_status(
        grpc.StatusCode.INVALID_ARGUMENT, stub.Classify, knn_pb2.ClassifyRequest(model="iris", key_id=key)
    )
    # the iris key used for the wine model, and a wine-shaped query under the iris model
    expect_status(
        grpc.StatusCode.FAILED_PRECONDITION,
        stub.Classify,
        knn_pb2.ClassifyRequest(model="wine", key_id=key, encrypted_query=good_query),
    )
    _, wine = keyed_model("wine", SETTINGS)  # a Wine client's query (its keys need no upload)
    wine_query = wine.encrypt(np.zeros(13, dtype=np.int64))
    expect_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        stub.Classify,
        knn_pb2.ClassifyRequest(model="iris", key_id=key, encrypted_query=wine_query),
    )
    expect_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        stub.ClassifyBatch,
        knn_pb2.ClassifyBatchRequest(model="iris", key_id=key),
    )
    # oversized: beyond the transport's message limit
    expect_status(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        stub.Classify,
        knn_pb2.ClassifyRequest(model="iris", key_id=key, encrypted_query=b"\x00" * (9 << 20)),
    )
    paillier = paillier_pb2_grpc.PaillierKnnServiceStub(channel)
    expect_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        paillier.Distances,
        paillier_pb2.DistancesRequest(
            model="iris",
            public_key_n=b"\x0f" * 8,
            encrypted_levels=[b"\x01"] * 4,
            encrypted_square_norm=b"\x01",
        ),
    )
    expect_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        paillier.Labels,
        paillier_pb2.LabelsRequest(model="iris", indices=list(range(6))),
    )
    assert_serving(channel)


def test_bad_key_uploads(channel, running):
    """Junk uploads (of the model's expected key size, so that they reach the store's checks; a
    size outside it is refused first) leave nothing behind."""
    stub = knn_pb2_grpc.KnnServiceStub(channel)
    before = {k.key_id for k in running.keys.entries()}
    low, _ = running.hosted["iris"].key_size_window
    data = (b"not really keys" * (low // 15 + 1))[:low]
    digest = hashlib.sha256(data).hexdigest()
    step = 4 << 20

    def upload(total: int, pieces: list[bytes], model: str = "iris"):
        first = knn_pb2.KeyChunk(model=model, total_size=total, sha256=digest, data=pieces[0])
        return iter([first, *(knn_pb2.KeyChunk(data=piece) for piece in pieces[1:])])

    whole = [data[i : i + step] for i in range(0, len(data), step)]
    truncated = upload(len(data), [data[:500]])
    assert "ended after 500" in expect_status(grpc.StatusCode.INVALID_ARGUMENT, stub.RegisterKeys, truncated)
    garbage = upload(len(data), whole)
    assert "not usable evaluation keys" in expect_status(
        grpc.StatusCode.INVALID_ARGUMENT, stub.RegisterKeys, garbage
    )
    small = upload(1500, [data[:1500]])
    assert "the upload announces 1500" in expect_status(
        grpc.StatusCode.INVALID_ARGUMENT, stub.RegisterKeys, small
    )
    too_big = upload(1 << 40, [data[:500]])
    expect_status(grpc.StatusCode.RESOURCE_EXHAUSTED, stub.RegisterKeys, too_big)
    expect_status(grpc.StatusCode.NOT_FOUND, stub.RegisterKeys, upload(len(data), [data[:500]], "nope"))
    expect_status(grpc.StatusCode.INVALID_ARGUMENT, stub.RegisterKeys, iter([]))
    assert {k.key_id for k in running.keys.entries()} == before
    assert not list(running.keys.directory.glob(".upload-*"))
    assert_serving(channel)


@pytest.mark.slow
def test_keys_are_prepared_at_registration(channel, running, data_dir, iris_prepared):
    """The client's warm-up query was evaluated at registration and kept owner-only for restarts;
    a warm-up query that does not fit rejects the upload, and only the first chunk may carry one."""
    warmup = data_dir / "warmup" / f"{iris_prepared.key_id}.ct"
    assert warmup.is_file() and warmup.stat().st_mode & 0o777 == 0o600
    assert (warmup.parent.stat().st_mode & 0o777) == 0o700
    stub = knn_pb2_grpc.KnnServiceStub(channel)
    before = {k.key_id for k in running.keys.entries()}
    data = iris_prepared.client.evaluation_keys_bytes()
    digest = hashlib.sha256(data).hexdigest()

    pieces = [data[i : i + (4 << 20)] for i in range(0, len(data), 4 << 20)]

    def upload(first: dict, later: dict):
        yield knn_pb2.KeyChunk(model="iris", total_size=len(data), sha256=digest, data=pieces[0], **first)
        for piece in pieces[1:]:
            yield knn_pb2.KeyChunk(data=piece, **later)

    bad = upload({"warmup_query": b"x" * 64}, {})
    assert "warm-up" in expect_status(grpc.StatusCode.INVALID_ARGUMENT, stub.RegisterKeys, bad)
    assert len(pieces) > 1
    late = upload({}, {"warmup_query": b"x"})
    assert "first chunk" in expect_status(grpc.StatusCode.INVALID_ARGUMENT, stub.RegisterKeys, late)
    assert {k.key_id for k in running.keys.entries()} == before
    assert_serving(channel)


def _last_used(running, key_id: str) -> float:
    return next(k.last_used for k in running.keys.entries() if k.key_id == key_id)


@pytest.mark.slow
def test_only_a_successful_evaluation_keeps_keys_alive_and_results_are_returned_as_computed(
    channel, running, iris_prepared, recut
):
    """Attack on the store's fairness: cheap invalid calls naming a key id would keep the key
    alive for ever were it marked used before the query is parsed. Only a successful evaluation
    moves its last-used time.

    Circuit privacy (threat-models.md): the result is returned as concrete computed it, not re-randomised.
    The same query gives byte-identical results: a deterministic function of the query, the
    evaluation keys and the server's circuit (its training points)."""
    stub = knn_pb2_grpc.KnnServiceStub(channel)
    key = iris_prepared.key_id
    query = iris_prepared.client.encrypt(np.array([1, 2, 3, 4]))
    before = _last_used(running, key)
    for bad in (b"\x01garbage" * 8, recut(query), b""):
        request = knn_pb2.ClassifyRequest(model="iris", key_id=key, encrypted_query=bad)
        expect_status(grpc.StatusCode.INVALID_ARGUMENT, stub.Classify, request)
    assert _last_used(running, key) == before
    request = knn_pb2.ClassifyRequest(model="iris", key_id=key, encrypted_query=query)
    first, second = (stub.Classify(request, timeout=300).encrypted_class for _ in range(2))
    assert _last_used(running, key) > before
    assert first == second


@pytest.mark.slow
def test_a_hostile_servers_result_in_another_layout_is_not_decrypted(
    remote, running, iris_prepared, monkeypatch, recut
):
    """A server answering with its result's payload cut in two (concrete's decryption then writes
    outside its buffer, in the process that holds the secret key): the client refuses it."""
    evaluator = running.services.evaluator
    honest = evaluator.classify
    monkeypatch.setattr(evaluator, "classify", lambda evaluation: [recut(r) for r in honest(evaluation)])
    with pytest.raises(ValueError, match=r"encrypted result has .* 2 blob"):
        remote.classify(iris_prepared, np.array([5.1, 3.5, 1.4, 0.2]))


def test_models_say_which_algorithm_runs(remote, running):
    algorithms = {m.name: m.algorithm for m in remote.models()}
    assert algorithms == {"iris": "fast", "wine": "fast"}


@pytest.mark.slow
def test_concurrent_clients_are_all_correct(running, remote, iris_prepared, held_out):
    rows = held_out[10:14]  # four clients at once: one more than the server's 3 evaluation slots
    answers: dict[int, int] = {}

    def work(i: int) -> None:
        answers[i] = remote.classify(iris_prepared, rows[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(rows))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert [answers[i] for i in range(len(rows))] == reference(running, "iris", rows)


def assert_serving(channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "petlab.knn.v1.KnnService"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_plaintext_refused_off_loopback(serve, hosted, tmp_path):
    with pytest.raises(ValueError, match="refusing plaintext"), serve(tmp_path, hosted, host="0.0.0.0"):
        pass


def test_unknown_models_get_one_answer_from_every_service(channel):
    """One lookup (server/common/rpc_errors.py): the same status and words from the k-NN and Paillier
    services, and an unnamed model is INVALID_ARGUMENT in both."""
    knn = knn_pb2_grpc.KnnServiceStub(channel)
    paillier = paillier_pb2_grpc.PaillierKnnServiceStub(channel)
    answers = [
        expect_status(
            grpc.StatusCode.NOT_FOUND, knn.GetClientSpecs, knn_pb2.GetClientSpecsRequest(model="mnist")
        ),
        expect_status(grpc.StatusCode.NOT_FOUND, paillier.Labels, paillier_pb2.LabelsRequest(model="mnist")),
    ]
    assert answers[0] == answers[1] == "no model named 'mnist'; this server hosts iris, wine"
    expect_status(grpc.StatusCode.INVALID_ARGUMENT, knn.GetClientSpecs, knn_pb2.GetClientSpecsRequest())
    expect_status(grpc.StatusCode.INVALID_ARGUMENT, paillier.Labels, paillier_pb2.LabelsRequest())


def test_server_reflection_lists_the_services(channel):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {
        "petlab.knn.v1.KnnService",
        "petlab.paillier.v1.PaillierKnnService",
        "grpc.health.v1.Health",
    } <= services


@pytest.mark.slow
def test_damaged_key_cache_is_replaced(channel, running, held_out, remote, iris_prepared, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(remote.cache_dir, cache)  # the module's registered keys: no key generation here
    fresh = KnnRemote(channel, "test-server", cache, timeout=300, show_progress=False)
    first = fresh.prepare("iris")
    assert first.key_id and (first.directory / "keys.bin").is_file()
    (first.directory / "keys.bin").write_bytes(b"damaged")
    again = fresh.prepare("iris")
    assert again.key_id and again.key_id != first.key_id
    assert fresh.classify(again, held_out[7]) == reference(running, "iris", held_out[7:8])[0]
    (again.directory / "keys.bin").unlink()  # keys gone, key id left behind
    third = fresh.prepare("iris")  # registered with the server's warm-up query, like `again`
    assert third.key_id not in (first.key_id, again.key_id) and (third.directory / "keys.bin").is_file()


def test_paillier_baseline_is_off_by_default(serve, tmp_path, hosted):
    """Attack: with q = 0 and q = e_f, a handful of Distances and Labels calls on the baseline
    recover every training point and label. A server started without the opt-in does not answer
    them at all, nor lists the service."""
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    with serve(tmp_path, hosted) as default, make_channel(f"127.0.0.1:{default.port}") as channel:
        paillier = paillier_pb2_grpc.PaillierKnnServiceStub(channel)
        expect_status(
            grpc.StatusCode.UNIMPLEMENTED,
            paillier.Labels,
            paillier_pb2.LabelsRequest(model="iris", indices=[0]),
        )
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
        assert "petlab.paillier.v1.PaillierKnnService" not in services
        assert "petlab.knn.v1.KnnService" in services
    options, _ = parse_args(["serve", "--model", "iris"])
    assert options.paillier.enable_paillier_baseline is False
    options, _ = parse_args(["serve", "--model", "iris", "--enable-paillier-baseline"])
    assert options.paillier.enable_paillier_baseline is True


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        (["--csv", "/nonexistent/rows.csv"], "/nonexistent/rows.csv: No such file or directory"),
        (["--features", "1,2"], "takes 4 finite features"),
        (["--features", "a,b,c,d"], "comma-separated"),
    ],
)
def test_client_validates_inputs_before_making_keys(running, tmp_path, capsys, rows, says):
    """Bad input is one line on stderr and exit status 2, before any key is generated or uploaded
    (not hundreds of MB generated and uploaded first, nor a traceback)."""
    from petlab.client.main import main as client_main

    cache = tmp_path / "cache"
    before = {k.key_id for k in running.keys.entries()}
    status = client_main(
        [
            "classify",
            "--server",
            f"127.0.0.1:{running.port}",
            "--model",
            "iris",
            "--cache-dir",
            str(cache),
            *rows,
        ]
    )
    err = capsys.readouterr().err.strip()
    assert status == 2 and says in err and len(err.splitlines()) == 1
    assert not cache.exists() or not list(cache.rglob("keys.bin"))
    assert {k.key_id for k in running.keys.entries()} == before


def test_idle_uploads_cannot_freeze_the_server(serve, tmp_path, hosted):
    """Attack: 8 RegisterKeys streams that never send a chunk, to hold every worker so that every
    other call waits for its deadline. At most ``upload_slots`` uploads run (the
    rest are refused at once), an idle one is cancelled after ``first_chunk_seconds``, and cheap
    calls answer throughout."""
    from petlab.server.common.admission import ServiceLimits

    limits = ServiceLimits(first_chunk_seconds=1.0)
    release = threading.Event()

    def silent():
        release.wait(30)
        return
        yield  # a generator that sends nothing

    with (
        serve(tmp_path, hosted, limits=limits) as server,
        make_channel(f"127.0.0.1:{server.port}") as channel,
    ):
        stub = knn_pb2_grpc.KnnServiceStub(channel)
        uploads = [stub.RegisterKeys.future(silent(), timeout=20) for _ in range(8)]
        started = time.perf_counter()
        assert stub.ListModels(knn_pb2.ListModelsRequest(), timeout=3).models
        assert_serving(channel)
        assert time.perf_counter() - started < 3
        codes = []
        for upload in uploads:
            with pytest.raises(grpc.RpcError) as failure:
                upload.result(timeout=15)
            codes.append(failure.value.code())
        release.set()
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 8 - limits.upload_slots
        # the ones that got a slot were cancelled by the watchdog, long before their 20 s deadline
        assert time.perf_counter() - started < 10
        assert set(codes) <= {
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            grpc.StatusCode.CANCELLED,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        }
        assert server.keys.entries() == []
        assert not list((tmp_path / "keys").glob(".upload-*"))
        assert stub.ListModels(knn_pb2.ListModelsRequest(), timeout=3).models


def test_keys_for_an_earlier_circuit_are_never_used(serve, hosted_model, tmp_path):
    """Keys stored for model "iris" while it had another circuit (a restart with another n) must not
    reach the new circuit: concrete crashes the process on evaluation keys that do not fit. They are
    answered as unknown (NOT_FOUND, so the client uploads again) and forgotten, and not prepared at
    start."""
    from petlab.server.knn.service import key_tag

    old, new = (
        hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast")),
        hosted_model("iris", KnnSettings(n=8, k=3, algorithm="fast")),
    )
    assert key_tag(old) != key_tag(new)
    with serve(tmp_path, {"iris": old}) as running:
        stored = running.keys.put(key_tag(old), "", 16, hashlib.sha256(b"k" * 16).hexdigest(), [b"k" * 16])
    with serve(tmp_path, {"iris": new}) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        assert running.prepared_keys == 0
        stub = knn_pb2_grpc.KnnServiceStub(channel)
        with pytest.raises(grpc.RpcError) as failure:
            stub.Classify(
                knn_pb2.ClassifyRequest(model="iris", key_id=stored.key_id, encrypted_query=b"q"), timeout=30
            )
        assert failure.value.code() == grpc.StatusCode.NOT_FOUND and "key id" in failure.value.details()
        assert running.keys.entries() == []
