"""One encrypted query over many workers: cost against n up to each data set's whole
training set, whole circuit in process against the split module on ``LocalCluster(2)``.

``petlab-experiments split-bench`` measures, for each data set and n (``--algorithm``: the default
family with the data owner's settings, ``server.knn.datasets.owner_settings``, or ``fast`` at
k = 3 and 4-bit features; training points chosen as ``petlab-server`` does), in one run:

* ``whole, in process``: the unsplit circuit (the default on one machine) through
  ``LocalEvaluator``, the path ``petlab-server`` takes without a cluster;
* ``split P, in process``: the split module's graph node by node in this process (the split's
  own overhead, without Dask), which also weighs every stage's output: the bytes that move between
  stages per query;
* ``split P, LocalCluster(P)``: the same module through ``ClusterEvaluator`` on a ``LocalCluster``
  of P worker processes (one thread each, its share of the cores), the path of ``--local-workers``.

Per row: PBS per query (the compiled count, and the family's cost model from public figures:
``stage_pbs`` of ``crypto.knn.<family>.split``), PBS on the critical path (the longest chain of
stages, one worker per partition), compile seconds, evaluation-key bytes (compressed, as uploaded) and raw
key material, bytes up and down per query, bytes between stages, latency (median of the timed
queries after one untimed query that prepares the keys), the evaluating processes' CPU seconds per
query, the load average, and whether every answer equals the clear reference. Every encrypted
class is checked. :mod:`petlab.experiments.split_model` fits the latency model on these rows,
checks it on the rows it was not fitted on and extrapolates to 16 machines and 10^5 points.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import psutil

from petlab.crypto.knn.config import circuit_statistics
from petlab.crypto.knn.deployment import (
    KnnClient,
    client_specs_bytes,
    parse_ciphertext,
    parse_evaluation_keys,
    run_stage,
)
from petlab.crypto.knn.families import (
    DEFAULT_ALGORITHM,
    classify_clear,
    compile_plan,
    encode_query,
    family_of,
    split_program,
)
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.split.program import (
    compile_program,
    critical_path_pbs,
    graph_pbs,
    module_statistics,
    run_graph,
)
from petlab.server.knn.datasets import bundled_public_bounds, load_bundled, owner_settings

COLUMNS = [
    "algorithm",
    "dataset",
    "d",
    "n",
    "n_kept",
    "parts",
    "config",
    "pbs",
    "pbs_model",
    "pbs_critical",
    "compile_s",
    "eval_key_bytes",
    "raw_key_bytes",
    "query_bytes",
    "result_bytes",
    "stage_bytes",
    "median_s",
    "latencies_s",
    "cpu_s_per_query",
    "load",
    "correct",
]
DEFAULT_SIZES: dict[str, list[int | None]] = {  # None: the whole training set
    "iris": [40, None],
    "wine": [40, None],
    "breast_cancer": [40, 160, None],
    "digits": [40, 160, None],
}


def _cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def _timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


def settings_for(algorithm: str, dataset: str, n: int | None) -> KnnSettings:
    """The data owner's settings for the default family (``owner_settings``) at ``n``; k = 3 and
    4 bits for another family."""
    owner = owner_settings(dataset)
    if algorithm == owner.algorithm:
        return replace(owner, n=n)
    return KnnSettings(n=n, k=3, bits=4, algorithm=algorithm)


def model_for(algorithm: str, dataset: str, n: int | None):
    train, test = load_bundled(dataset).split()
    model = build_model(
        dataset,
        train.features,
        train.labels,
        settings_for(algorithm, dataset, n),
        train.class_names,
        train.feature_names,
        public_bounds=bundled_public_bounds(dataset),
    )
    return model, model.quantizer.transform(test.features)


def whole_pbs_model(plan, config) -> int:
    """The whole circuit's PBS by its family's cost model."""
    if family_of(plan).name == "fast":
        from petlab.crypto.knn.fast.split import whole_pbs

        return whole_pbs(plan, config)
    from petlab.crypto.knn.thermo.cost import count

    return count(np.bincount(plan.labels, minlength=plan.n_classes).tolist(), plan.k, plan.spec).total


def _row(dataset, model, parts, config, **values) -> dict:
    return {
        "algorithm": model.algorithm,
        "dataset": dataset,
        "d": model.d,
        "n_kept": model.plan.n,
        "parts": parts,
        "config": config,
        "load": round(os.getloadavg()[0], 2),
        **values,
    }


def _timing(latencies: list[float], cpu: float) -> dict:
    """Median and every latency of the timed queries, and their CPU seconds per query."""
    return {
        "median_s": round(float(np.median(latencies)), 3),
        "latencies_s": " ".join(f"{x:.2f}" for x in latencies),
        "cpu_s_per_query": round(cpu / len(latencies), 2),
    }


def _keys(client: KnnClient, directory: Path) -> tuple[Path, int]:
    data = client.evaluation_keys_bytes()
    path = directory / f"keys-{hashlib.sha256(data).hexdigest()[:12]}"
    path.write_bytes(data)
    return path, len(data)


def bench_whole(dataset: str, n: int, model, levels: np.ndarray, queries: int, scratch: Path) -> dict:
    from petlab.server.knn.evaluators import Evaluation, LocalEvaluator

    config = model.circuit_config()
    circuit, compile_seconds = _timed(compile_plan, model.plan, config)
    statistics = circuit_statistics(circuit)
    client = KnnClient(client_specs_bytes(circuit.server))
    client.generate_keys()
    key_path, key_bytes = _keys(client, scratch)
    evaluator = LocalEvaluator({dataset: circuit.server})
    ciphertexts = [encrypt(client, model, q) for q in levels[: queries + 1]]
    answers, latencies = [], []
    cpu = 0.0
    for i, ciphertext in enumerate(ciphertexts):  # the first prepares the keys (untimed)
        before = _cpu_seconds()
        (answer,), seconds = _timed(evaluator.classify, Evaluation(dataset, "k", key_path, [ciphertext]))
        if i:
            latencies.append(seconds)
            cpu += _cpu_seconds() - before
        answers.append(client.decrypt_class(answer))
    return _row(
        dataset,
        model,
        1,
        "whole, in process",
        n=n,
        pbs=statistics["pbs_count"],
        pbs_model=whole_pbs_model(model.plan, config),
        pbs_critical=statistics["pbs_count"],
        compile_s=round(compile_seconds, 1),
        eval_key_bytes=key_bytes,
        raw_key_bytes=statistics["bootstrap_key_bytes"] + statistics["keyswitch_key_bytes"],
        query_bytes=len(ciphertexts[0]),
        result_bytes=len(answer),
        stage_bytes=0,
        **_timing(latencies, cpu),
        correct=answers == classify_clear(model.plan, levels[: queries + 1]).tolist(),
    )


def encrypt(client: KnnClient, model, levels: np.ndarray) -> bytes:
    """A query as the shipped client sends it: encoded as the model's family says, encrypted."""
    return client.encrypt(encode_query(model.algorithm, levels, model.plan.bits))


def bench_split(
    dataset: str, n: int, model, levels: np.ndarray, queries: int, parts: int, cluster, scratch: Path
) -> list[dict]:
    """The split module in process (node by node, weighing the stages' outputs), then on the
    cluster through ``ClusterEvaluator``."""
    from petlab.server.knn.cluster_evaluation import ClusterEvaluator
    from petlab.server.knn.evaluators import Evaluation

    config = model.circuit_config()
    program = split_program(model.plan, parts, config)
    module, compile_seconds = _timed(compile_program, program, config)
    names = [stage.name for stage in program.stages]
    statistics = module_statistics(module, names)
    per_stage = statistics["pbs_per_stage"]
    client = KnnClient(client_specs_bytes(module.server))
    client.generate_keys()
    key_path, key_bytes = _keys(client, scratch)
    keys = parse_evaluation_keys(key_path.read_bytes())
    ciphertexts = [encrypt(client, model, q) for q in levels[: queries + 1]]
    expected = classify_clear(model.plan, levels[: queries + 1]).tolist()
    common = {
        "n": n,
        "pbs": graph_pbs(per_stage, program.graph),
        "pbs_model": graph_pbs(program.description["stage_pbs"], program.graph),
        "pbs_critical": critical_path_pbs(per_stage, program.graph),
        "compile_s": round(compile_seconds, 1),
        "eval_key_bytes": key_bytes,
        "raw_key_bytes": statistics["bootstrap_key_bytes"] + statistics["keyswitch_key_bytes"],
        "query_bytes": len(ciphertexts[0]),
    }
    answers, latencies, cpu, stage_bytes, answer = _in_process(
        module, keys, program.graph, ciphertexts, client
    )
    common |= {"result_bytes": len(answer), "stage_bytes": stage_bytes}
    rows = [
        _row(dataset, model, parts, f"split {parts}, in process", **common, **_timing(latencies, cpu))
        | {"correct": answers == expected}
    ]
    evaluator = ClusterEvaluator(cluster, {dataset: module.server}, {dataset: program.graph})
    try:
        answers, latencies, cpu = [], [], 0.0
        for i, ciphertext in enumerate(ciphertexts):
            before = sum(cluster.client.run(_cpu_seconds).values())
            (answer,), seconds = _timed(evaluator.classify, Evaluation(dataset, "k", key_path, [ciphertext]))
            if i:
                latencies.append(seconds)
                cpu += sum(cluster.client.run(_cpu_seconds).values()) - before
            answers.append(client.decrypt_class(answer))
    finally:
        evaluator.forget("k")
    config_name = f"split {parts}, LocalCluster({parts})"
    rows.append(
        _row(dataset, model, parts, config_name, **common, **_timing(latencies, cpu))
        | {"correct": answers == expected}
    )
    return rows


def _in_process(module, keys, graph, ciphertexts: list[bytes], client: KnnClient):
    """The split module in process, node by node, weighing what moves between stages: the classes,
    the latencies and CPU seconds of every query but the first, the bytes between stages and the
    last answer."""
    answers, latencies, stage_bytes, cpu = [], [], 0, 0.0
    answer = b""
    for i, ciphertext in enumerate(ciphertexts):
        sizes: list[int] = []

        def run(node, inputs, sizes=sizes):
            value = run_stage(module.server, keys, node.stage, inputs)
            sizes.append(len(value.serialize()))
            return value

        before = _cpu_seconds()
        values, seconds = _timed(run_graph, graph, parse_ciphertext(ciphertext), run)
        answer = values[graph.answer.name].serialize()
        if i:
            latencies.append(seconds)
            cpu += _cpu_seconds() - before
        stage_bytes = sum(sizes[:-1])  # every stage's output but the answer
        answers.append(client.decrypt_class(answer))
    return answers, latencies, cpu, stage_bytes, answer


def run_bench(
    algorithm: str, sizes: dict[str, list[int | None]], queries: int, parts: int, out: Path
) -> list[dict]:
    from petlab.dask_cluster import ClusterSpec, DaskCluster

    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with (
        tempfile.TemporaryDirectory(prefix="petlab-split-bench-") as scratch,
        DaskCluster.start(ClusterSpec(local_workers=parts)) as cluster,
    ):
        for dataset, ns in sizes.items():
            for asked in ns:
                model, levels = model_for(algorithm, dataset, asked)
                n = model.plan.n if asked is None else asked  # None: the whole training set
                print(f"{dataset} n={n} (kept {model.plan.n}): whole, in process ...", flush=True)
                rows.append(bench_whole(dataset, n, model, levels, queries, Path(scratch)))
                print(f"  {rows[-1]}", flush=True)
                print(f"{dataset} n={n}: split over {parts} ...", flush=True)
                rows += bench_split(dataset, n, model, levels, queries, parts, cluster, Path(scratch))
                print(f"  {rows[-2]}\n  {rows[-1]}", flush=True)
                write_csv(rows, out)  # a long run keeps what it measured
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    from petlab.experiments.cluster_bench import write_csv as write_rows

    write_rows(rows, COLUMNS, path)


def read_csv(path: Path) -> list[dict]:
    from petlab.experiments.cluster_bench import read_csv as read_rows

    return read_rows(path, text=("algorithm", "dataset", "config", "latencies_s"))


def parse_sizes(items: list[str]) -> dict[str, list[int | None]]:
    """``iris=40,all digits=40,1437``; none: :data:`DEFAULT_SIZES` ("all": the whole training set)."""
    if not items:
        return dict(DEFAULT_SIZES)
    sizes: dict[str, list[int | None]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if name not in DEFAULT_SIZES or not values:
            raise ValueError(f"--sizes takes DATASET=N,N,... for {', '.join(DEFAULT_SIZES)}; got {item!r}")
        sizes[name] = [None if v == "all" else int(v) for v in values.split(",")]
    return sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algorithm", default=DEFAULT_ALGORITHM, help="the family to split")
    parser.add_argument(
        "--sizes", nargs="*", default=[], help="DATASET=N,N,...|all (default: up to each whole training set)"
    )
    parser.add_argument("--queries", type=int, default=3, help="timed queries per configuration")
    parser.add_argument("--parts", type=int, default=2, help="partitions = LocalCluster workers")
    parser.add_argument("--out", type=Path, default=Path("results/split_bench.csv"), help="the CSV to write")
    parser.add_argument(
        "--report-only", action="store_true", help="rebuild the report from the CSV of an earlier run"
    )


def run(args: argparse.Namespace) -> int:
    from petlab.experiments.split_model import report

    if args.report_only:
        rows = read_csv(args.out)
    else:
        rows = run_bench(args.algorithm, parse_sizes(args.sizes), args.queries, args.parts, args.out)
    text = report(rows)
    args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0 if all(row["correct"] for row in rows) else 1
