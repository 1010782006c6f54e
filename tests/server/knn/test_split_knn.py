"""One query over many workers: the thermo (default, one pass) and fast (two passes)
families split over P partitions of their training sets. Each split's clear reference against a
sort (ties included) and the unsplit reference on every data set, the stage graph's checks, the
compiled modules (simulated) against the reference with their PBS against the cost model, and real
encryption through the gRPC server, in process and on a real LocalCluster where one query's
partitions run on both workers."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petlab.crypto.knn.families import classify_clear as whole_reference
from petlab.crypto.knn.families import default_config
from petlab.crypto.knn.fast.plan import build_fast_plan
from petlab.crypto.knn.fast.reference import classify, classify_by_sorting
from petlab.crypto.knn.fast.split import split_program, stage_pbs
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.quantization import MinMaxQuantizer
from petlab.crypto.knn.split.program import (
    ANSWER_STAGE,
    QUERY,
    Node,
    StageGraph,
    check_program,
    check_query_inputs,
    classify_clear,
    compile_program,
    module_statistics,
    partitions,
    run_graph,
)
from petlab.crypto.knn.thermo import reference as thermo_reference
from petlab.crypto.knn.thermo import split as thermo_split
from petlab.crypto.knn.thermo.encoding import thermometer
from petlab.crypto.knn.thermo.plan import build_thermo_plan
from petlab.server.knn.datasets import load_bundled

CONFIG = default_config("fast")
THERMO = default_config("thermo")


def brute_force(plan, queries):
    return classify_by_sorting(
        plan.train, plan.labels, plan.k, plan.n_classes, queries, plan.bits, plan.distance_bits
    )


# ------------------------------------------------------------------ clear


def test_partitions_are_public_and_balanced():
    for n in (2, 7, 40, 1437):
        for parts in sorted({min(p, n) for p in (2, 3, 16, n)}):
            cut = partitions(n, parts)
            assert sorted(np.concatenate(cut).tolist()) == list(range(n))
            sizes = [len(part) for part in cut]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    for parts in (0, 8):
        with pytest.raises(ValueError):
            partitions(7, parts)


@pytest.mark.parametrize("name", ["iris", "wine", "breast_cancer", "digits"])
def test_split_reference_equals_the_whole_reference(name):
    """Every shipped data set, several P (one partition smaller than k included): the split
    algorithm's class is the unsplit algorithm's on held-out rows and random queries."""
    train, test = load_bundled(name).split()
    quantizer = MinMaxQuantizer.fit(train.features, 4)  # the first 150 training rows, no selection
    n_classes = int(train.labels.max()) + 1
    plan = build_fast_plan(quantizer.transform(train.features[:150]), train.labels[:150], n_classes, 3, 4)
    queries = np.vstack(
        [
            quantizer.transform(test.features)[:60],
            np.random.default_rng(0).integers(0, 16, size=(20, plan.d)),
        ]
    )
    expected = classify(plan, queries)
    assert np.array_equal(expected, brute_force(plan, queries))
    for parts in (2, 3, 7, plan.n // 2):
        assert np.array_equal(classify_clear(split_program(plan, parts, CONFIG), queries), expected), parts


def test_every_tie_at_the_kth_distance_votes_across_partitions():
    """Attack on the tie rule across partitions: seven points at the same distance, k = 2, P = 3.
    Each partition holds more tied points than its k-list keeps, so a split that voted from each
    partition's k smallest would count 6 votes at most; every tied point must vote (3 for class 0,
    4 for class 1), so class 1 wins, as the unsplit circuit answers."""
    train = np.array([[0, 0]] * 7 + [[15, 15]] * 2)
    labels = np.array([0, 1, 1, 0, 1, 1, 0, 0, 0])
    plan = build_fast_plan(train, labels, 2, 2, 4)
    program = split_program(plan, 3, CONFIG)
    query = np.array([1, 1])
    values = run_graph(program.graph, query, lambda node, args: program.stage(node.stage).twin(*args))
    votes = sum(values[f"count_{p}"] for p in range(3))
    assert votes.tolist() == [3, 4]
    assert values[ANSWER_STAGE] == 1 == classify(plan, query[None, :])[0]


@settings(max_examples=60)
@given(
    n=st.integers(2, 24),
    d=st.integers(1, 3),
    levels=st.integers(1, 4),
    n_classes=st.integers(2, 4),
    k=st.integers(1, 5),
    parts=st.integers(2, 9),
    seed=st.integers(0, 2**16),
)
def test_split_equals_a_sort_with_heavy_ties(n, d, levels, n_classes, k, parts, seed):
    """Few levels make many equal distances and equal votes; any P up to n, k up to n."""
    rng = np.random.default_rng(seed)
    k, parts = min(k, n), min(parts, n)
    labels = rng.integers(0, n_classes, size=n)
    labels[:2] = [0, 1]
    train = rng.integers(0, levels, size=(n, d)) * (15 // max(levels - 1, 1))
    plan = build_fast_plan(train, labels, n_classes, k, 4)
    queries = rng.integers(0, 16, size=(12, d))
    assert np.array_equal(
        classify_clear(split_program(plan, parts, CONFIG), queries), brute_force(plan, queries)
    )


@pytest.mark.parametrize("name", ["iris", "wine", "breast_cancer", "digits"])
def test_thermo_split_reference_equals_the_whole_reference(name):
    """The default family: every shipped data set, odd and even P (odd merge-tree levels carry a
    partition's lists up a level), the split's class is the one-process class."""
    train, test = load_bundled(name).split()
    quantizer = MinMaxQuantizer.fit(train.features, 4)
    n_classes = int(train.labels.max()) + 1
    plan = build_thermo_plan(quantizer.transform(train.features[:150]), train.labels[:150], n_classes, 3, 4)
    queries = np.vstack(
        [quantizer.transform(test.features)[:60], np.random.default_rng(0).integers(0, 16, size=(20, plan.d))]
    )
    expected = thermo_reference.classify(plan, queries)
    codes = thermometer(queries, 4)
    for parts in (2, 3, 5, 16):
        program = thermo_split.split_program(plan, parts, THERMO)
        assert np.array_equal(classify_clear(program, codes), expected), parts


@settings(max_examples=40)
@given(
    per_class=st.integers(3, 8),
    d=st.integers(1, 3),
    levels=st.integers(1, 4),
    n_classes=st.integers(2, 4),
    parts=st.integers(2, 9),
    seed=st.integers(0, 2**16),
)
def test_thermo_split_equals_a_sort_with_heavy_ties(per_class, d, levels, n_classes, parts, seed):
    """Few levels: many equal distances, fillers in partitions that miss a class, capped votes."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(n_classes), per_class)  # every class has at least k = 3 points
    rng.shuffle(labels)
    train = rng.integers(0, levels, size=(len(labels), d)) * (15 // max(levels - 1, 1))
    plan = build_thermo_plan(train, labels, n_classes, 3, 4)
    queries = rng.integers(0, 16, size=(12, d))
    program = thermo_split.split_program(plan, min(parts, plan.n), THERMO)
    expected = thermo_reference.classify_by_sorting(train, labels, 3, n_classes, queries, 4, plan.spec)
    assert np.array_equal(classify_clear(program, thermometer(queries, 4)), expected)


def test_malformed_graphs_are_refused():
    plan = build_fast_plan(np.arange(12).reshape(6, 2), np.arange(6) % 2, 2, 3, 4)
    program = split_program(plan, 2, CONFIG)
    check_program(program)
    nodes = program.graph.nodes
    broken = [
        nodes[:-1],  # no answer node at the end
        (Node("finish", "finish", ("count_0", "count_1")), *nodes),  # reads before it is computed
        (*nodes[:-1], Node("finish", "finish", ("count_0",))),  # one input short
        (*nodes[:-1], Node("finish", "nowhere", ("count_0", "count_1"))),  # unknown stage
        (*nodes, Node("finish", "finish", ("count_0", "count_1"))),  # a name used twice
    ]
    for graph in broken:
        with pytest.raises(ValueError):
            check_program(type(program)(StageGraph(2, graph), program.stages, program.client_inputset))
    with pytest.raises(ValueError):
        split_program(plan, 1, CONFIG)  # one partition is the whole circuit, not a split


# ------------------------------------------------------------------ compiled module


@pytest.fixture(scope="module")
def split_iris(iris_split):
    """The fast family: Iris, n = 8, k = 3, P = 3 (partitions of 3, 3 and 2 points: the last pads
    its k-list), compiled once for simulation."""
    train, test = iris_split
    settings = KnnSettings(n=8, algorithm="fast")
    model = build_model("iris", train.features, train.labels, settings, train.class_names)
    program = split_program(model.plan, 3, CONFIG)
    module = compile_program(program, CONFIG, simulation=True, execution=False)
    return model, program, module, model.quantizer.transform(test.features)


@pytest.fixture(scope="module")
def thermo_split_iris(iris_split):
    """The default family: Iris, n = 12, k = 3, P = 3 (a merge tree with a carried level),
    compiled once for simulation."""
    train, test = iris_split
    model = build_model("iris", train.features, train.labels, KnnSettings(n=12), train.class_names)
    program = thermo_split.split_program(model.plan, 3, THERMO)
    module = compile_program(program, THERMO, simulation=True, execution=False)
    return model, program, module, model.quantizer.transform(test.features)


@pytest.mark.parametrize("fixture", ["split_iris", "thermo_split_iris"])
def test_split_module_pbs_match_the_cost_model(fixture, request):
    """Every stage's compiled PBS count equals the family's model: a lookup concrete dropped (as
    it does with a table it built constant) would show here."""
    _, program, module, _ = request.getfixturevalue(fixture)
    statistics = module_statistics(module, [stage.name for stage in program.stages])
    assert statistics["pbs_per_stage"] == program.description["stage_pbs"]


@pytest.mark.parametrize("fixture", ["split_iris", "thermo_split_iris"])
def test_split_simulation_equals_reference(fixture, request, simulate_all):
    """Held-out rows, the training points themselves (distance 0 ties) and random queries: the
    simulated module, stage by stage over the graph, gives the one-process class."""
    model, program, module, test_levels = request.getfixturevalue(fixture)
    functions = module.functions()
    queries = np.vstack(
        [test_levels[:10], model.plan.train[:6], np.random.default_rng(4).integers(0, 16, (6, 4))]
    )
    encoded = thermometer(queries, 4) if model.algorithm == "thermo" else queries

    class Graph:  # the whole graph, simulated stage by stage, as simulate_all expects a circuit
        @staticmethod
        def simulate(query):
            run = lambda node, args: functions[node.stage].simulate(*args)  # noqa: E731
            return run_graph(program.graph, query, run)[ANSWER_STAGE]

    expected = whole_reference(model.plan, queries)
    assert np.array_equal(simulate_all(Graph, encoded, expected), expected)


def test_the_query_ciphertext_must_fit_every_stage_that_reads_it(split_iris):
    """The client encrypts once, for partition_0; the build checks that every stage reading the
    query takes the same ciphertext type. A graph feeding the query where a k-list goes is refused."""
    _, program, module, _ = split_iris
    specs = module.server.client_specs.serialize()
    check_query_inputs(specs, program.graph)
    wrong = StageGraph(3, (*program.graph.nodes[:3], Node("merge", "merge", (QUERY, QUERY, QUERY))))
    with pytest.raises(ValueError, match="would not fit"):
        check_query_inputs(specs, wrong)


# ------------------------------------------------------------------ real encryption


@pytest.mark.slow
def test_one_query_runs_on_both_workers_and_equals_reference(serve, local_cluster, tmp_path_factory):
    """``petlab-server serve --model iris --cluster ADDRESS`` with two workers: the server compiles
    the split module over 2 partitions (``--partitions`` 0 = one per worker), the client sends one
    ciphertext and decrypts one class, the query's stages ran on both workers, and the class equals
    the reference. Then the same keys in process (``--partitions`` without a cluster: the local
    evaluator runs the graph node by node): the same answer."""
    from petlab.client.knn_client import KnnRemote, make_channel
    from petlab.dask_cluster import ClusterSpec
    from petlab.server.knn.cluster_evaluation import worker_cache_info
    from petlab.server.knn.evaluators import Evaluation, LocalEvaluator

    client = local_cluster.client
    options = {
        "models": ["iris"],
        "settings": KnnSettings(n=12),
        "cluster": ClusterSpec(address=client.scheduler.address),
    }
    with (
        serve(tmp_path_factory.mktemp("split-server"), **options) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        hosted = running.hosted["iris"]
        assert hosted.graph is not None and hosted.graph.parts == 2
        remote = KnnRemote(
            channel, "split", tmp_path_factory.mktemp("client"), timeout=300, show_progress=False
        )
        prepared = remote.prepare("iris")  # the warm-up query runs the whole graph on the cluster
        rows = load_bundled("iris").split()[1].features
        before = {w: i["stages"] for w, i in client.run(worker_cache_info).items()}
        single = remote.classify(prepared, rows[0])
        after = {w: i["stages"] for w, i in client.run(worker_cache_info).items()}
        # (a batch on the cluster: the hostile-callers test below answers one)
        assert running.cluster.key_scatters == 1  # broadcast once to every worker
    model = hosted.model
    assert model.algorithm == "thermo"  # the default family, split
    expected = whole_reference(model.plan, model.quantizer.transform(rows[:4])).tolist()
    assert single == expected[0]
    ran = {worker: after[worker] - before.get(worker, 0) for worker in after}
    assert sum(ran.values()) == len(hosted.graph.nodes)  # 2 partitions, 1 merge, finish
    assert all(count >= 1 for count in ran.values()), ran  # a partition on each worker

    key_path = tmp_path_factory.mktemp("keys") / "keys"
    key_path.write_bytes(prepared.client.evaluation_keys_bytes())
    evaluator = LocalEvaluator({"iris": hosted.server}, {"iris": hosted.graph})
    query = prepared.client.encrypt(thermometer(model.quantizer.transform(rows[3:4])[0], model.plan.bits))
    (answer,) = evaluator.classify(Evaluation("iris", "key", key_path, [query]))
    assert prepared.client.decrypt_class(answer) == expected[3]


def test_partitions_flag_and_its_automatic_value(monkeypatch, tmp_path, iris_model, iris_fast_model):
    """``--partitions`` (``PETLAB_PARTITIONS``): 0 is one partition per cluster worker, and the
    whole circuit without a cluster; a family that cannot be split is refused only when asked."""
    from dataclasses import replace

    from petlab.dask_cluster import ClusterSpec
    from petlab.server.knn.startup import model_parts, resolve_partitions
    from petlab.server.main import parse_args

    class Scheduler:  # what resolve_partitions asks a cluster
        def worker_count(self) -> int:
            return 5

    options = parse_args(["serve", "--data-dir", str(tmp_path), "--local-workers", "2"])[0].knn
    assert options.partitions == 0 and resolve_partitions(options, Scheduler()) == 2
    options = replace(options, cluster=ClusterSpec(address="tcp://scheduler:8786"))
    assert resolve_partitions(options, Scheduler()) == 5
    options = replace(options, cluster=ClusterSpec())
    assert resolve_partitions(options, None) == 1
    monkeypatch.setenv("PETLAB_PARTITIONS", "3")
    options = parse_args(["serve", "--data-dir", str(tmp_path)])[0].knn
    assert resolve_partitions(options, None) == 3  # in process, split: for measurements
    assert model_parts(iris_fast_model, 3, explicit=True) == 3
    assert model_parts(iris_fast_model, 500, explicit=False) == iris_fast_model.plan.n
    assert model_parts(iris_model, 3, explicit=False) == 1  # the paper family runs whole
    with pytest.raises(ValueError, match="cannot split"):
        model_parts(iris_model, 3, explicit=True)


@pytest.mark.parametrize("parts", [2, 3, 5, 8, 9])
def test_a_merge_tree_program_combines_every_partition_once(parts):
    """The one-pass shape (partition, a tree of merges, finish) for a family whose partition state
    merges associatively: here each partition's k smallest values, merged as sorted k-lists; the
    tree's answer is the k-th smallest of all values for any P, odd levels included."""
    from petlab.crypto.knn.split.program import merge_tree_program

    k, values = 3, np.random.default_rng(parts).integers(0, 9, size=40)
    cut = partitions(len(values), parts)
    program = merge_tree_program(
        parts,
        lambda p: (None, lambda x, p=p: np.sort(np.concatenate([x[cut[p]], [99] * k]))[:k]),
        (None, lambda a, b: np.sort(np.concatenate([a, b]))[:k]),
        (None, lambda state: int(state[k - 1])),
        [values],
    )
    check_program(program)
    assert [n.stage for n in program.graph.nodes].count("finish") == 1
    assert len({n.stage for n in program.graph.nodes if n.stage.startswith("merge_")}) == int(
        np.ceil(np.log2(parts))
    )
    assert classify_clear(program, values[None, :])[0] == np.sort(values)[k - 1]


def test_the_cost_model_recovers_a_known_latency_law():
    """split-bench's model on synthetic rows that follow CPU = c PBS (whole, 2 ms; the split 3 ms)
    and T = h + t1 PBS_critical (cluster, 0.5 s + 20 ms): the fit recovers c, the split's ratio, h
    and t1 and predicts the middle size exactly; the critical path is the most loaded worker plus
    merge and finish."""
    from petlab.crypto.knn.split.program import critical_path_pbs
    from petlab.experiments.split_model import predicted_pbs, report

    rows = []
    for n, whole, critical in [(40, 200, 150), (160, 500, 300), (455, 1500, 800)]:
        common = {
            "algorithm": "fast",
            "dataset": "breast_cancer",
            "d": 30,
            "n": n,
            "n_kept": n,
            "compile_s": 1.0,
            "eval_key_bytes": 1e6,
        }
        common |= {"query_bytes": 1, "result_bytes": 1, "stage_bytes": 0, "load": 1.0}
        rows.append(
            {
                **common,
                "parts": 1,
                "config": "whole, in process",
                "pbs": whole,
                "pbs_model": whole,
                "pbs_critical": whole,
                "median_s": 0.01 * whole,
                "cpu_s_per_query": 0.002 * whole,
                "correct": True,
            }
        )
        rows.append(
            {
                **common,
                "parts": 2,
                "config": "split 2, LocalCluster(2)",
                "pbs": 2 * critical,
                "pbs_model": 2 * critical,
                "pbs_critical": critical,
                "median_s": 0.5 + 0.02 * critical,
                "cpu_s_per_query": 0.003 * 2 * critical,
                "correct": True,
            }
        )
    text = report(rows)
    assert "c = 2.0 ms CPU per PBS" in text and "3.0 ms CPU per PBS (1.50x)" in text
    assert "h = 0.50 s + t1 = 20.0 ms" in text
    assert "500 PBS: CPU predicted 1.00 s, measured 1.00 s" in text
    assert "300 critical PBS: wall predicted 6.50 s, measured 6.50 s" in text
    assert "exact on every row" in text
    critical, whole = predicted_pbs("fast", "breast_cancer", 30, 100_000, 16)
    assert 10 < whole / critical < 16  # linear work over 16 workers; the distances run in both passes
    plan = build_fast_plan(np.arange(40).reshape(20, 2) % 16, np.arange(20) % 2, 2, 3, 4)
    program = split_program(plan, 3, CONFIG)
    per_stage = stage_pbs(plan, 3, CONFIG)
    first = max(per_stage[f"partition_{p}"] for p in range(3))
    second = max(per_stage[f"count_{p}"] for p in range(3))
    path = first + per_stage["merge"] + second + per_stage["finish"]  # partition, merge, count, finish
    assert critical_path_pbs(per_stage, program.graph) == path
    critical, whole = predicted_pbs("thermo", "digits", 64, 100_000, 16)
    assert 12 < whole / critical < 16  # one pass: nothing computed twice


# ------------------------------------------------------------------ hostile callers of a split model


@pytest.fixture(scope="module")
def split_hosting(run_share):
    """Iris, n = 12, the default family split over 2 partitions as a server hosts it, and clients
    (fixed seeds) of it and of the same model split over 3 partitions (compiled and keyed once per
    run: ``run_share``)."""
    from petlab.crypto.knn.deployment import KnnClient
    from petlab.server.knn.model_cache import load_or_compile
    from petlab.server.knn.service import HostedModel

    train, _ = load_bundled("iris").split()
    model = build_model("iris", train.features, train.labels, KnnSettings(n=12), train.class_names)
    made = {}
    for parts in (2, 3):
        with run_share.lock("split_hosting", parts) as lock:
            compiled = load_or_compile(model, THERMO, run_share.directory, parts=parts)
            hosted = HostedModel(model, compiled.server, dataset="iris", graph=compiled.graph)
            client = KnnClient(hosted.specs)
            run_share.keys(client, lock, seed=25)
        made[parts] = hosted, client
    return made


@pytest.mark.slow
# on the cluster only, to keep make test within its 10 minutes: the wire checks run in the servicer
# before either evaluator, and test_one_query_runs_on_both_workers_and_equals_reference also
# runs the same keys in process (PETLAB_HOSTILE_IN_PROCESS=1 adds the in-process variant)
@pytest.mark.parametrize(
    "where", ["on the cluster"] + (["in process"] if os.environ.get("PETLAB_HOSTILE_IN_PROCESS") else [])
)
def test_hostile_calls_to_a_split_model_are_refused_and_genuine_ones_answered(
    serve, split_hosting, keyed_model, recut, tmp_path, request, where
):
    """Where the wire checks and the split meet: a split model (``--partitions 2`` in process, and on a
    LocalCluster of 2 workers) served to hostile callers. Key sets of another partition count
    (whole, P = 3) and of another data set, as sent and cut or padded to the model's size; warm-up
    queries and queries re-cut, of another model, of garbage, too large, or laid out as a stage's
    intermediate value; a batch holding one re-cut query: each INVALID_ARGUMENT, nothing stored.
    Malformed thermometer codes, non-binary values included (concrete's own client encrypts any
    value of the input's width), are evaluated without harm. Then genuine queries, single and in a
    batch, are answered equal to the clear reference, and the server keeps serving."""
    import grpc

    from petlab.client.knn_client import make_channel
    from petlab.crypto.knn.wire_format import SCHEMA
    from petlab.dask_cluster import ClusterSpec
    from petlab.protos import knn_pb2, knn_pb2_grpc

    hosted, own = split_hosting[2]
    options = {}
    if where == "on the cluster":
        address = request.getfixturevalue("local_cluster").client.scheduler.address
        options["cluster"] = ClusterSpec(address=address)
    genuine_keys = own.evaluation_keys_bytes()
    zeros = own.encrypt(thermometer(np.zeros(4, dtype=np.int64), 4))
    foreign = {
        "whole circuit": keyed_model("iris", KnnSettings(n=12))[1],
        "3 partitions": split_hosting[3][1],
        "another data set": keyed_model("wine", KnnSettings(n=6))[1],
    }
    specs = json.loads(hosted.specs)
    stage_output = next(c for c in specs["circuits"] if c["name"] == "partition_0")["outputs"][0]
    words = int(np.prod(stage_output["rawInfo"]["shape"]["dimensions"]))
    intermediate = SCHEMA.Value.new_message(
        payload={"data": [bytes(8 * words)]},
        rawInfo=stage_output["rawInfo"],
        typeInfo=stage_output["typeInfo"],
    ).to_bytes()

    def upload(keys: bytes, warmup: bytes):
        digest = hashlib.sha256(keys).hexdigest()
        first = knn_pb2.KeyChunk(
            model="iris", total_size=len(keys), sha256=digest, data=keys[: 1 << 20], warmup_query=warmup
        )
        return iter(
            [
                first,
                *(knn_pb2.KeyChunk(data=keys[o : o + (1 << 20)]) for o in range(1 << 20, len(keys), 1 << 20)),
            ]
        )

    def refused(call, request) -> str:
        with pytest.raises(grpc.RpcError) as failure:
            call(request, timeout=300)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT, failure.value.details()
        return failure.value.details()

    with (
        serve(tmp_path / "data", {"iris": hosted}, **options) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        stub = knn_pb2_grpc.KnnServiceStub(channel)
        for client in foreign.values():
            keys = client.evaluation_keys_bytes()
            refused(stub.RegisterKeys, upload(keys, zeros))
            resized = keys[: len(genuine_keys)] + bytes(max(len(genuine_keys) - len(keys), 0))
            refused(stub.RegisterKeys, upload(resized, zeros))
        wine_query = foreign["another data set"].encrypt(thermometer(np.zeros(13, dtype=np.int64), 4))
        hostile = [recut(zeros), wine_query, bytes(5000), intermediate]
        for warmup in hostile:
            assert "warm-up query does not fit" in refused(stub.RegisterKeys, upload(genuine_keys, warmup))
        assert not list((tmp_path / "data" / "keys").glob("*.bin"))
        key_id = stub.RegisterKeys(upload(genuine_keys, zeros), timeout=300).key_id

        def query(ciphertext: bytes) -> knn_pb2.ClassifyRequest:
            return knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=ciphertext)

        for ciphertext in [*hostile, bytes((1 << 20) + 1)]:
            refused(stub.Classify, query(ciphertext))
        batch = knn_pb2.ClassifyBatchRequest(
            model="iris", key_id=key_id, encrypted_queries=[zeros, recut(zeros)]
        )
        refused(stub.ClassifyBatch, batch)

        width = specs["circuits"][0]["inputs"][0]["typeInfo"]["lweCiphertext"]["encoding"]["integer"]["width"]
        answer_width = json.loads(hosted.specs)["circuits"][-1]["outputs"][0]["typeInfo"]["lweCiphertext"]
        for code in (np.full(60, (1 << width) - 1), np.eye(60, dtype=np.int64)[7]):
            answer = stub.Classify(query(own.encrypt(code)), timeout=300).encrypted_class
            assert 0 <= own.decrypt_class(answer) < 1 << answer_width["encoding"]["integer"]["width"]

        model = hosted.model
        rows = model.quantizer.transform(load_bundled("iris").split()[1].features)
        expected = whole_reference(model.plan, rows)
        chosen = [int(np.flatnonzero(expected == c)[0]) for c in np.unique(expected)]
        answers = [  # one single query, then every chosen class in one batch
            own.decrypt_class(
                stub.Classify(query(own.encrypt(thermometer(rows[i], 4))), timeout=300).encrypted_class
            )
            for i in chosen[:1]
        ]
        batch = knn_pb2.ClassifyBatchRequest(
            model="iris",
            key_id=key_id,
            encrypted_queries=[own.encrypt(thermometer(rows[i], 4)) for i in chosen],
        )
        answers += [own.decrypt_class(a) for a in stub.ClassifyBatch(batch, timeout=300).encrypted_classes]
        assert answers == [*expected[chosen[:1]].tolist(), *expected[chosen].tolist()] and len(chosen) >= 2
        assert stub.ListModels(knn_pb2.ListModelsRequest(), timeout=30).models


# ------------------------------------------------------------------ concrete's runtime and SIGPIPE


def _write_to_a_closed_socket() -> str:
    """What a write to a peer that has gone does in this process: Python ignores SIGPIPE, so it
    is a ``BrokenPipeError``, unless a signal handler of concrete's runtime kills the process."""
    import socket

    mine, theirs = socket.socketpair()
    theirs.close()
    try:
        mine.send(b"x")
    except BrokenPipeError:
        return "EPIPE"
    finally:
        mine.close()
    return "sent"


AFTER_AN_EVALUATION = """
import sys
from pathlib import Path
import numpy as np
from petlab.crypto.knn.deployment import KnnClient
from petlab.crypto.knn.families import default_config
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.thermo.encoding import thermometer
from petlab.server.app import ServerOptions, start
from petlab.server.knn.datasets import load_bundled
from petlab.server.knn.evaluators import Evaluation
from petlab.server.knn.model_cache import load_or_compile
from petlab.server.knn.service import HostedModel
from tests.server.knn.test_split_knn import _write_to_a_closed_socket

scratch = Path(sys.argv[1])
train, _ = load_bundled("iris").split()
model = build_model("iris", train.features, train.labels, KnnSettings(n=6), train.class_names)
compiled = load_or_compile(model, default_config("thermo"), scratch / "cache", parts=2)
hosted = HostedModel(model, compiled.server, dataset="iris", graph=compiled.graph)
running = start(ServerOptions.of(scratch / "data", models=[], port=0), {"iris": hosted})
client = KnnClient(hosted.specs)
client.generate_keys(secret_seed=3, encryption_seed=3)
(scratch / "keys").write_bytes(client.evaluation_keys_bytes())
query = client.encrypt(thermometer(np.zeros(4, dtype=np.int64), 4))
running.services.evaluator.classify(Evaluation("iris", "key", scratch / "keys", [query]))
print(_write_to_a_closed_socket(), flush=True)
running.stop(grace=0)
"""


@pytest.mark.slow
def test_a_broken_pipe_after_an_in_process_evaluation_is_an_error_not_a_crash(tmp_path):
    """concrete's runtime (HPX) installs its own SIGPIPE handler the first time it runs a circuit,
    replacing Python's SIG_IGN: from then on a write to a peer that has gone (a log pipe, a Dask
    TLS connection) kills the process by SIGSEGV instead of raising ``BrokenPipeError`` (the test
    process would die as a LocalCluster connection closed after an in-process split evaluation).
    The server starts the runtime itself, then ignores SIGPIPE again."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    run = subprocess.run(
        [sys.executable, "-c", AFTER_AN_EVALUATION, str(tmp_path)],
        capture_output=True,
        timeout=600,
        cwd=root,
    )
    assert run.returncode == 0 and run.stdout.split() == [b"EPIPE"], (run.returncode, run.stderr[-800:])


@pytest.mark.slow
def test_a_broken_pipe_after_a_split_evaluation_does_not_kill_a_worker(
    split_hosting, local_cluster, tmp_path
):
    """The same on the workers, which run concrete: after one query's stages ran on both workers of
    a LocalCluster, a write to a closed socket on each worker is a ``BrokenPipeError`` there, not
    a dead worker (its peers' connections, which carry the stages' intermediate values, close
    whenever a worker goes)."""
    from petlab.server.knn.cluster_evaluation import ClusterEvaluator
    from petlab.server.knn.evaluators import Evaluation

    hosted, client = split_hosting[2]
    evaluator = ClusterEvaluator(local_cluster, {"iris": hosted.server}, {"iris": hosted.graph})
    (tmp_path / "keys").write_bytes(client.evaluation_keys_bytes())
    query = client.encrypt(thermometer(np.zeros(4, dtype=np.int64), 4))
    evaluator.classify(Evaluation("iris", "key", tmp_path / "keys", [query], timeout=300))
    workers = local_cluster.client.run(_write_to_a_closed_socket)
    assert list(workers.values()) == ["EPIPE"] * 2, workers
