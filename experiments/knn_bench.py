"""HE-kNN-V cost figures on Iris against n: the numbers asked for in the encrypted k-NN issue.

For each n: compile time, key generation time, evaluation-key bytes and encrypted-query bytes with
and without concrete's compression, result bytes, programmable-bootstrap count, and the median and
p90 per-query server latency (real encryption, in process, through the byte API). The clear
reference's latency is measured in the same run, so every latency is also reported as a ratio.
Paper figures (Ameur et al., PSD 2022, Tables 4-5): 1.72 s per Iris query single-threaded, 0.46 s
parallel, 28 KB per query.
"""

from __future__ import annotations

import csv
import os
import time
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

import numpy as np
from petlab.crypto.deployment import KnnClient, parse_ciphertext, parse_evaluation_keys, run_encrypted
from petlab.crypto.knn_circuit import CircuitConfig, circuit_statistics, compile_circuit
from petlab.crypto.knn_model import KnnSettings, build_model
from petlab.crypto.knn_reference import classify
from petlab.experiments.machine import cpu_model
from petlab.server.datasets import load_bundled
from tqdm import tqdm

COLUMNS = [
    "dataset",
    "n",
    "k",
    "bits",
    "d",
    "sign_bits",
    "global_p_error",
    "strategy",
    "compile_s",
    "keygen_s",
    "pbs_count",
    "eval_key_bytes_compressed",
    "eval_key_bytes_uncompressed",
    "query_bytes_compressed",
    "query_bytes_uncompressed",
    "result_bytes",
    "server_median_s",
    "server_p90_s",
    "clear_median_s",
    "server_over_clear",
    "queries",
    "encrypted_equals_clear",
    "cpu",
    "cores",
    "concrete_python",
]


def _sizes(circuit, query: np.ndarray) -> tuple[float, int, int]:
    client = KnnClient(circuit.server.client_specs.serialize())
    started = time.perf_counter()
    client.generate_keys()
    keygen = time.perf_counter() - started
    return keygen, len(client.evaluation_keys_bytes()), len(client.encrypt(query))


def bench_one(
    n: int,
    queries: int,
    config: CircuitConfig,
    k: int = 3,
    bits: int = 4,
    d: int | None = None,
    uncompressed_sizes: bool = True,
) -> dict:
    """One HE-kNN-V configuration on Iris (the first ``d`` features when given); the uncompressed
    key and ciphertext sizes need a second compilation and key generation (skip for sweeps)."""
    train, test = load_bundled("iris").split()
    columns = slice(None) if d is None else slice(0, d)
    model = build_model("iris", train.features[:, columns], train.labels, KnnSettings(n=n, k=k, bits=bits))
    levels = model.quantizer.transform(test.features[:, columns])[:queries]

    started = time.perf_counter()
    circuit = compile_circuit(model.plan, config)
    compile_seconds = time.perf_counter() - started
    eval_plain = query_plain = -1
    if uncompressed_sizes:
        plain = replace(config, compress_evaluation_keys=False, compress_input_ciphertexts=False)
        _, eval_plain, query_plain = _sizes(compile_circuit(model.plan, plain), levels[0])

    client = KnnClient(circuit.server.client_specs.serialize())
    started = time.perf_counter()
    client.generate_keys()
    keygen_seconds = time.perf_counter() - started
    eval_bytes = client.evaluation_keys_bytes()
    evaluation_keys = parse_evaluation_keys(eval_bytes)

    latencies, answers, result = [], [], b""
    for query in tqdm(levels, desc=f"n={n} encrypted queries", leave=False):
        ciphertext = client.encrypt(query)
        started = time.perf_counter()
        result = run_encrypted(circuit.server, evaluation_keys, parse_ciphertext(ciphertext))
        latencies.append(time.perf_counter() - started)
        answers.append(client.decrypt_class(result))
    clear_times = []
    for query in levels:
        started = time.perf_counter()
        classify(model.plan, query)
        clear_times.append(time.perf_counter() - started)

    median, clear_median = float(np.median(latencies)), float(np.median(clear_times))
    return {
        "dataset": "iris",
        "n": n,
        "k": k,
        "bits": bits,
        "d": model.d,
        "sign_bits": config.sign_bits,
        "global_p_error": config.global_p_error,
        "strategy": config.parameter_selection_strategy,
        "compile_s": round(compile_seconds, 2),
        "keygen_s": round(keygen_seconds, 2),
        "pbs_count": circuit_statistics(circuit)["pbs_count"],
        "eval_key_bytes_compressed": len(eval_bytes),
        "eval_key_bytes_uncompressed": eval_plain,
        "query_bytes_compressed": len(client.encrypt(levels[0])),
        "query_bytes_uncompressed": query_plain,
        "result_bytes": len(result),
        "server_median_s": round(median, 3),
        "server_p90_s": round(float(np.percentile(latencies, 90)), 3),
        "clear_median_s": clear_median,
        "server_over_clear": round(median / clear_median),
        "queries": len(levels),
        "encrypted_equals_clear": answers == classify(model.plan, levels).tolist(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "concrete_python": version("concrete-python"),
    }


def run_bench(ns: list[int], queries: int, out: Path, config: CircuitConfig | None = None) -> int:
    config = config or CircuitConfig()
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in tqdm(ns, desc="values of n"):
        rows.append(bench_one(n, queries, config))
        tqdm.write(", ".join(f"{c}={rows[-1][c]}" for c in COLUMNS[:21]))
    new_file = not out.exists()
    with out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new_file:
            writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {out}")
    return 0 if all(r["encrypted_equals_clear"] for r in rows) else 1
