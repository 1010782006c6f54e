"""Scaling out on Dask: encrypted k-NN and the OnTheMap release, one machine vs a cluster.

``petlab-experiments cluster-bench`` measures, in one run on this machine:

* k-NN through the real gRPC server: in-process evaluation, then ``--local-workers 1`` and
  ``--local-workers 2`` (a ``LocalCluster`` of worker processes with one thread each). Several
  clients, each with its own keys, send queries concurrently; per configuration: throughput
  (queries/s), p50/p99 latency as the client sees it, and the CPU seconds one evaluation costs
  (``cpu_s_per_query``: the evaluating processes' CPU time over the timed queries);
* the OnTheMap release (``petlab-synth onthemap``, a child process): single process vs
  ``--local-workers 2``, wall time and the peak resident memory of the whole process tree (the sum
  over the driver and its worker processes, sampled every 0.1 s), at two sizes.

:mod:`petlab.experiments.cluster_model` turns the figures into cost models, checks them against the
measured points and extrapolates to the national scale; the report goes to ``results/``. A part
skipped (``--n`` or ``--synth-workers`` with no values) is reported from its CSV of an earlier run.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from petlab.client.knn_client import KnnRemote, make_channel
from petlab.crypto.knn.families import classify_clear
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.dask_cluster import ClusterSpec
from petlab.server.app import ServerOptions, start
from petlab.server.knn.datasets import load_bundled
from petlab.server.knn.model_cache import load_or_compile
from petlab.server.knn.service import HostedModel

KNN_COLUMNS = [
    "config",
    "workers",
    "n",
    "clients",
    "queries",
    "wall_s",
    "throughput_qps",
    "p50_s",
    "p99_s",
    "cpu_s_per_query",
    "correct",
]
SYNTH_COLUMNS = [
    "config",
    "workers",
    "od_workers",
    "od_pairs",
    "wall_s",
    "peak_tree_rss_mb",
    "peak_max_rss_mb",
]


def _cpu_seconds() -> float:
    """This process's CPU time, all threads (runs on a Dask worker through ``client.run`` too)."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


def hosted_iris(settings: KnnSettings, cache_dir: Path) -> dict[str, HostedModel]:
    train, _ = load_bundled("iris").split()
    model = build_model(
        "iris", train.features, train.labels, settings, train.class_names, train.feature_names
    )
    compiled = load_or_compile(model, model.circuit_config(), cache_dir)
    return {"iris": HostedModel(model, compiled.server, dataset="iris")}


def bench_knn_config(
    config: str,
    workers: int,
    hosted: dict[str, HostedModel],
    rows: np.ndarray,
    clients: int,
    queries_per_client: int,
    scratch: Path,
) -> dict:
    spec = ClusterSpec(local_workers=workers) if workers else ClusterSpec()
    n = hosted["iris"].model.plan.n
    options = ServerOptions.of(
        scratch / f"server-n{n}-{config}",  # keys of another n must not be prepared
        models=[],
        port=0,
        cluster=spec,
        workers=clients + 8,
        limits=_limits(clients),
    )
    running = start(options, hosted)
    try:
        with make_channel(f"127.0.0.1:{running.port}") as channel:
            remotes = [
                KnnRemote(channel, "bench", scratch / f"client-{c}", timeout=600, show_progress=False)
                for c in range(clients)
            ]
            prepared = [remote.prepare("iris") for remote in remotes]
            for remote, p in zip(remotes, prepared, strict=True):  # untimed: uploads, first runs
                remote.classify(p, rows[0])
            latencies, answers, wall, cpu = _concurrent_queries(
                running, remotes, prepared, rows, queries_per_client
            )
    finally:
        running.stop(grace=1)
    model = hosted["iris"].model
    expected = classify_clear(model.plan, model.quantizer.transform(rows)).tolist()
    correct = all(
        answers[c, q] == expected[(c * queries_per_client + q) % len(rows)]
        for c in range(clients)
        for q in range(queries_per_client)
    )
    total = clients * queries_per_client
    return {
        "config": config,
        "workers": workers,
        "n": model.plan.n,
        "clients": clients,
        "queries": total,
        "wall_s": round(wall, 3),
        "throughput_qps": round(total / wall, 4),
        "p50_s": round(float(np.percentile(latencies, 50)), 3),
        "p99_s": round(float(np.percentile(latencies, 99)), 3),
        "cpu_s_per_query": round(cpu / total, 3),
        "correct": correct,
    }


def _concurrent_queries(
    running, remotes: list[KnnRemote], prepared: list, rows: np.ndarray, queries_per_client: int
) -> tuple[list[float], dict[tuple[int, int], int], float, float]:
    """Every client on its own thread, ``queries_per_client`` queries each: the latencies, the
    answers by (client, query), the wall seconds and the evaluations' CPU seconds."""
    latencies: list[float] = []
    answers: dict[tuple[int, int], int] = {}
    lock = threading.Lock()

    def work(c: int) -> None:
        for q in range(queries_per_client):
            row = rows[(c * queries_per_client + q) % len(rows)]
            started = time.perf_counter()
            answer = remotes[c].classify(prepared[c], row)
            with lock:
                latencies.append(time.perf_counter() - started)
                answers[c, q] = answer

    cpu_before = _evaluation_cpu(running)
    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(c,)) for c in range(len(remotes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    cpu = _evaluation_cpu(running) - cpu_before
    return latencies, answers, wall, cpu


def _limits(clients: int):
    from petlab.server.common.admission import ServiceLimits

    return ServiceLimits(evaluation_slots=max(3, clients) + 1)


def _evaluation_cpu(running) -> float:
    """CPU seconds of the processes that evaluate: this one in-process, else the Dask workers."""
    if running.cluster is None:
        return _cpu_seconds()
    return float(sum(running.cluster.cluster.client.run(_cpu_seconds).values()))


def bench_knn(ns: list[int], clients: int, queries_per_client: int, cache_dir: Path) -> list[dict]:
    _, test = load_bundled("iris").split()
    out = []
    with tempfile.TemporaryDirectory(prefix="petlab-cluster-bench-") as scratch:
        for n in ns:
            hosted = hosted_iris(KnnSettings(n=n, k=3, bits=4), cache_dir)
            for config, workers in (("in-process", 0), ("LocalCluster(1)", 1), ("LocalCluster(2)", 2)):
                print(f"k-NN n={n}: {config} ...", flush=True)
                row = bench_knn_config(
                    config, workers, hosted, test.features, clients, queries_per_client, Path(scratch)
                )
                print(f"  {row}", flush=True)
                out.append(row)
    return out


# ------------------------------------------------------------------ OnTheMap


def _tree_rss(process: psutil.Process) -> tuple[int, int]:
    """(sum, max) resident bytes over a process and its descendants."""
    sizes = []
    for p in [process, *process.children(recursive=True)]:
        try:
            sizes.append(p.memory_info().rss)
        except psutil.Error:
            continue
    return sum(sizes), max(sizes, default=0)


def run_sampled(command: list[str]) -> tuple[float, int, int]:
    """Wall seconds and peak (tree sum, single process) resident bytes of a child command."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    process = psutil.Process(child.pid)
    peak_sum = peak_max = 0
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(child.stdout or []), daemon=True)
    reader.start()
    while child.poll() is None:
        total, biggest = _tree_rss(process)
        peak_sum, peak_max = max(peak_sum, total), max(peak_max, biggest)
        time.sleep(0.1)
    wall = time.perf_counter() - started
    reader.join()
    if child.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{''.join(output)[-3000:]}")
    return wall, peak_sum, peak_max


def bench_onthemap(sizes: list[int], blocks_per_worker: float, seed: int) -> list[dict]:
    from petlab.plaindata.onthemap.commute_data import generate

    out = []
    with tempfile.TemporaryDirectory(prefix="petlab-onthemap-bench-") as scratch:
        for workers in sizes:
            print(f"OnTheMap: generating {workers} workers ...", flush=True)
            data = generate(workers, seed, blocks_per_worker=blocks_per_worker)
            od_path, crosswalk_path = data.write(Path(scratch) / f"commute-{workers}")
            base = [
                sys.executable, "-m", "petlab.plaindata.cli", "onthemap", "--od", str(od_path),
                "--xwalk", str(crosswalk_path), "--eps", "4.6", "--delta", "1e-5",
            ]  # fmt: skip
            runs = (
                ("single process", 0, [*base, "--out", str(Path(scratch) / "single.csv.gz")]),
                (
                    "LocalCluster(2)",
                    2,
                    [*base, "--local-workers", "2", "--out", str(Path(scratch) / "parts")],
                ),
            )
            for config, cluster_workers, command in runs:
                print(f"OnTheMap {workers} workers: {config} ...", flush=True)
                wall, peak_sum, peak_max = run_sampled(command)
                row = {
                    "config": config,
                    "workers": cluster_workers,
                    "od_workers": workers,
                    "od_pairs": len(data.od),
                    "wall_s": round(wall, 2),
                    "peak_tree_rss_mb": round(peak_sum / 2**20, 1),
                    "peak_max_rss_mb": round(peak_max / 2**20, 1),
                }
                print(f"  {row}", flush=True)
                out.append(row)
    return out


def write_csv(rows: list[dict], columns: list[str], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path, text: tuple[str, ...] = ("config",)) -> list[dict]:
    """Rows of an earlier run (a part skipped in this one), numbers parsed except in the ``text``
    columns; none if absent."""
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for key, value in row.items():
            if value in ("True", "False"):
                row[key] = value == "True"
            elif key not in text:
                row[key] = float(value) if "." in value or "e" in value else int(value)
    return rows


def run_bench(
    ns: list[int],
    clients: int,
    queries_per_client: int,
    synth_sizes: list[int],
    blocks_per_worker: float,
    out_dir: Path,
    cache_dir: Path,
    seed: int = 1,
) -> int:
    from petlab.experiments.cluster_model import report

    knn_csv, synth_csv = out_dir / "cluster_bench_knn.csv", out_dir / "cluster_bench_onthemap.csv"
    knn = bench_knn(ns, clients, queries_per_client, cache_dir) if ns else read_csv(knn_csv)
    if ns:
        write_csv(knn, KNN_COLUMNS, knn_csv)
    synth = bench_onthemap(synth_sizes, blocks_per_worker, seed) if synth_sizes else read_csv(synth_csv)
    if synth_sizes:
        write_csv(synth, SYNTH_COLUMNS, synth_csv)
    text = report(knn, synth, os.cpu_count() or 1)
    (out_dir / "cluster_bench.md").write_text(text)
    print(text)
    return 0 if all(row["correct"] for row in knn) else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, nargs="*", default=[20], help="k-NN n values (none: skip k-NN)")
    parser.add_argument("--clients", type=int, default=2, help="concurrent clients, each with its own keys")
    parser.add_argument("--queries", type=int, default=6, help="timed queries per client and configuration")
    parser.add_argument(
        "--synth-workers",
        type=int,
        nargs="*",
        default=[150_000, 500_000, 1_500_000],
        help="OnTheMap sizes in workers (jobs); none: skip OnTheMap",
    )
    parser.add_argument(
        "--blocks-per-worker",
        type=float,
        default=233_726 / 1_500_000,
        help="census blocks per worker of the generated data (Minnesota's ratio by default)",
    )
    parser.add_argument("--out", type=Path, default=Path("results"), help="directory for the CSVs and .md")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(".petlab-cache/models"),
        help="compile cache of the k-NN circuits",
    )


def run(args: argparse.Namespace) -> int:
    return run_bench(
        args.n,
        args.clients,
        args.queries,
        args.synth_workers,
        args.blocks_per_worker,
        args.out,
        args.cache_dir,
    )
