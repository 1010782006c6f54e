"""Encrypted k-NN cost figures on Iris against n, for both circuit families in the same run.

For each (algorithm, n): PBS count, compile and key-generation time, evaluation-key bytes
(compressed as sent; raw = concrete's ``size_of_bootstrap_keys + size_of_keyswitch_keys``, the
uncompressed key material the server holds), bytes up (one encrypted
query) and down (one encrypted class), the key preparation a registration pays (the warm-up
query, ``server.knn.key_warmup``), the latency of a first query *without* that preparation (what every
client paid before), the first query after it and the steady-state median, the clear reference's
median, and ``global_p_error`` (concrete's bound on a wrong lookup per evaluation). Every
encrypted answer is checked against the clear reference of the same integer algorithm.
Latencies are wall time on a shared 2-core machine: compare rows of one run, not across runs.
Paper figures (Ameur et al., PSD 2022, Tables 4-5): 1.72 s per Iris query single-threaded, 0.46 s
parallel, 28 KB per query.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
from tqdm import tqdm

from petlab.crypto.knn.config import CircuitConfig, circuit_statistics
from petlab.crypto.knn.deployment import KnnClient, parse_ciphertext, parse_evaluation_keys, run_encrypted
from petlab.crypto.knn.families import ALGORITHMS, classify_clear, compile_plan, default_config
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.experiments.machine import cpu_model
from petlab.server.knn.datasets import load_bundled
from petlab.server.knn.key_warmup import prepare_keys

COLUMNS = [
    "algorithm",
    "dataset",
    "n",
    "n_kept",
    "k",
    "bits",
    "d",
    "global_p_error",
    "strategy",
    "pbs_count",
    "compile_s",
    "keygen_s",
    "eval_key_bytes_compressed",
    "eval_key_bytes_raw",
    "query_bytes",
    "result_bytes",
    "bytes_per_query",
    "key_preparation_s",
    "first_query_unprepared_s",
    "first_query_s",
    "server_median_s",
    "server_p90_s",
    "clear_median_s",
    "queries",
    "encrypted_equals_clear",
    "cpu",
    "cores",
    "concrete_python",
]
MARKDOWN_COLUMNS = COLUMNS[:23]


def _timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


def bench_one(
    n: int,
    queries: int,
    algorithm: str = "fast",
    config: CircuitConfig | None = None,
    k: int = 3,
    bits: int = 4,
    d: int | None = None,
) -> dict:
    """One configuration on Iris (the first ``d`` features when given)."""
    config = config or default_config(algorithm)
    train, test = load_bundled("iris").split()
    columns = slice(None) if d is None else slice(0, d)
    settings = KnnSettings(n=n, k=k, bits=bits, algorithm=algorithm)
    model = build_model("iris", train.features[:, columns], train.labels, settings)
    levels = model.quantizer.transform(test.features[:, columns])[: queries + 1]

    circuit, compile_seconds = _timed(compile_plan, model.plan, config)
    statistics = circuit_statistics(circuit)
    client = KnnClient(circuit.server.client_specs.serialize())
    _, keygen_seconds = _timed(client.generate_keys)
    key_bytes = client.evaluation_keys_bytes()

    # before: the first query on freshly deserialised keys pays their preparation
    cold_keys = parse_evaluation_keys(key_bytes)
    ciphertext = client.encrypt(levels[0])
    result, unprepared = _timed(run_encrypted, circuit.server, cold_keys, parse_ciphertext(ciphertext))
    answers = [client.decrypt_class(result)]
    del cold_keys
    # now: registration prepares the keys with the client's warm-up query
    keys = parse_evaluation_keys(key_bytes)
    warmup = client.encrypt(np.zeros(model.d, dtype=np.int64))
    _, preparation = _timed(prepare_keys, circuit.server, keys, warmup)
    latencies = []
    for query in tqdm(levels[1:], desc=f"{algorithm} n={n} encrypted queries", leave=False):
        result, seconds = _timed(run_encrypted, circuit.server, keys, parse_ciphertext(client.encrypt(query)))
        latencies.append(seconds)
        answers.append(client.decrypt_class(result))
    clear_times = [_timed(classify_clear, model.plan, query)[1] for query in levels]
    steady = latencies[1:] or latencies
    return {
        "algorithm": algorithm,
        "dataset": "iris",
        "n": n,
        "n_kept": model.plan.n,  # Iris has 120 training rows: a larger n keeps them all
        "k": k,
        "bits": bits,
        "d": model.d,
        "global_p_error": config.global_p_error,
        "strategy": config.parameter_selection_strategy,
        "pbs_count": statistics["pbs_count"],
        "compile_s": round(compile_seconds, 2),
        "keygen_s": round(keygen_seconds, 2),
        "eval_key_bytes_compressed": len(key_bytes),
        "eval_key_bytes_raw": statistics["bootstrap_key_bytes"] + statistics["keyswitch_key_bytes"],
        "query_bytes": len(ciphertext),
        "result_bytes": len(result),
        "bytes_per_query": len(ciphertext) + len(result),
        "key_preparation_s": round(preparation, 3),
        "first_query_unprepared_s": round(unprepared, 3),
        "first_query_s": round(latencies[0], 3),
        "server_median_s": round(float(np.median(steady)), 3),
        "server_p90_s": round(float(np.percentile(steady, 90)), 3),
        "clear_median_s": round(float(np.median(clear_times)), 6),
        "queries": len(levels),
        "encrypted_equals_clear": answers == classify_clear(model.plan, levels).tolist(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "concrete_python": version("concrete-python"),
    }


def run_bench(
    ns: list[int],
    queries: int,
    out: Path,
    algorithms: list[str],
    config: CircuitConfig | None = None,
    paper_max_n: int = 40,
) -> int:
    """Both algorithms side by side; the paper's circuit only up to ``paper_max_n`` (its cost
    grows with n^2: about 55 s per query at n = 40 here, so n = 80 and 160 would take hours)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in tqdm(ns, desc="values of n"):
        for algorithm in algorithms:
            if algorithm == "paper" and n > paper_max_n:
                continue
            rows.append(bench_one(n, queries, algorithm, config or default_config(algorithm)))
            tqdm.write(", ".join(f"{c}={rows[-1][c]}" for c in MARKDOWN_COLUMNS))
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    out.with_suffix(".md").write_text(markdown_table(rows))
    print(f"wrote {len(rows)} rows to {out} and {out.with_suffix('.md')}")
    return 0 if all(r["encrypted_equals_clear"] for r in rows) else 1


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    header = "| " + " | ".join(MARKDOWN_COLUMNS) + " |\n|" + "---|" * len(MARKDOWN_COLUMNS) + "\n"
    body = "".join("| " + " | ".join(str(r[c]) for c in MARKDOWN_COLUMNS) + " |\n" for r in rows)
    machine = f"\n{rows[0]['cores']} cores, {rows[0]['cpu']}, concrete-python {rows[0]['concrete_python']}\n"
    return header + body + machine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algorithm", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    parser.add_argument("--n", type=int, nargs="+", default=[10, 20, 40], help="values of n")
    parser.add_argument("--paper-max-n", type=int, default=40, help="largest n for the paper's circuit")
    parser.add_argument("--queries", type=int, default=5, help="encrypted queries per n (default 5)")
    parser.add_argument("--out", type=Path, default=Path("results/knn_bench.csv"))
    parser.add_argument("--sign-bits", type=int, default=CircuitConfig.sign_bits)
    parser.add_argument(
        "--global-p-error", type=float, default=None, help="default: per family (crypto.knn.families)"
    )
    parser.add_argument(
        "--strategy",
        choices=["multi", "mono"],
        default=None,
        help="default: per family (crypto.knn.families)",
    )


def run(args: argparse.Namespace) -> int:
    custom = args.global_p_error is not None or args.strategy is not None or args.sign_bits != 4
    config = (
        CircuitConfig(
            sign_bits=args.sign_bits,
            global_p_error=args.global_p_error or CircuitConfig.global_p_error,
            parameter_selection_strategy=args.strategy or "multi",
        )
        if custom
        else None
    )
    return run_bench(args.n, args.queries, args.out, args.algorithm, config, args.paper_max_n)
