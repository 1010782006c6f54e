"""Encrypted k-NN cost figures against n, for the circuit families side by side in the same run,
on any bundled data set (Iris by default) up to its whole training set (``--n all``).

For each (algorithm, n): PBS count, compile and key-generation time, evaluation-key bytes
(compressed as sent; raw = concrete's ``size_of_bootstrap_keys + size_of_keyswitch_keys``, the
uncompressed key material the server holds), bytes up (one encrypted
query) and down (one encrypted class), the key preparation a registration pays (the warm-up
query, ``server.knn.key_warmup``), the latency of a first query *without* that preparation (what every
client paid before), the first query after it and the steady-state median, the clear reference's
median, and ``global_p_error`` (concrete's bound on a wrong lookup per evaluation). Every
encrypted answer is checked against the clear reference of the same integer algorithm.
Latencies are wall time on a shared 2-core machine: compare rows of one run, not across runs.
``--owner-settings`` builds the thermo family with the data owner's bits and distance for the data
set (``server.knn.datasets.owner_settings``); with ``--n owner`` also the owner's own size choice
(Iris's 40 selected points, wine's condensation, every point of the others), so
``--dataset iris wine breast_cancer digits --owner-settings --n owner`` measures what each data
set's server runs. For thermo rows the cost model's PBS count
(``crypto.knn.thermo.cost``, no compilation) stands beside concrete's; :func:`cost_model_table`
turns the rows into PBS per point, seconds per PBS and an extrapolation to 10^5 points.
Paper figures (Ameur et al., PSD 2022, Tables 4-5): 1.72 s per Iris query single-threaded, 0.46 s
parallel, 28 KB per query.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from dataclasses import dataclass, replace
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd

from petlab.crypto.knn.config import CircuitConfig, circuit_statistics
from petlab.crypto.knn.deployment import KnnClient, parse_ciphertext, parse_evaluation_keys, run_encrypted
from petlab.crypto.knn.families import (
    ALGORITHMS,
    classify_clear,
    compile_plan,
    encode_query,
    family_of,
)
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.thermo import cost
from petlab.errors import BadInput
from petlab.experiments import markdown
from petlab.experiments.knn_accuracy import settings_accuracy
from petlab.experiments.machine import cpu_model
from petlab.progress import bar, say
from petlab.server.knn.datasets import BUNDLED, bundled_public_bounds, load_bundled, owner_settings
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
    "cost_model_pbs",
    "pbs_per_point",
    "complexity",
    "accuracy",
    "float_knn",
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
    "load_average",
    "encrypted_equals_clear",
    "cpu",
    "cores",
    "concrete_python",
]
MARKDOWN_COLUMNS = COLUMNS[: COLUMNS.index("server_p90_s") + 1]


def _timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


#: ``--n owner``: the owner settings' own n (and condensation), not a size chosen on the command line
OWNER_N = "owner"


def bench_one(
    n: int | str | None,
    queries: int,
    algorithm: str = "fast",
    config: CircuitConfig | None = None,
    k: int = 3,
    bits: int = 4,
    d: int | None = None,
    dataset: str = "iris",
    owner: bool = False,
    compile_only: bool = False,
    accuracy_splits: int = 0,
) -> dict:
    """One configuration on a bundled data set (the first ``d`` features when given; ``n`` None:
    the whole training set; ``owner``: the thermo family with the owner's bits and distance;
    ``accuracy_splits``: also the clear reference's mean accuracy over that many splits, each
    model built from its training split only, beside float k-NN's; ``n`` :data:`OWNER_N` with
    ``owner``: the owner settings' own n)."""
    if isinstance(n, str) and not (n == OWNER_N and owner and algorithm == "thermo"):
        raise ValueError("n 'owner' needs the owner settings and the thermo family")
    train, test = load_bundled(dataset).split()
    columns = slice(None) if d is None else slice(0, d)
    settings = _settings(n, k, bits, algorithm, dataset, owner)
    bounds = bundled_public_bounds(dataset) if d is None else None
    model = build_model(dataset, train.features[:, columns], train.labels, settings, public_bounds=bounds)
    config = config or model.circuit_config()  # the family's settings at the model's error budget
    levels = model.quantizer.transform(test.features[:, columns])[: queries + 1]
    bits = model.plan.bits
    accuracy: dict[str, float | str] = {"accuracy": "", "float_knn": ""}
    if accuracy_splits and d is None:
        ours, floats = settings_accuracy(dataset, settings, accuracy_splits)
        accuracy = {"accuracy": round(ours, 4), "float_knn": round(floats, 4)}

    circuit, compile_seconds = _timed(compile_plan, model.plan, config, compile_only)
    statistics = circuit_statistics(circuit)
    if compile_only:
        return {
            **_compiled_row(model, config, statistics, compile_seconds, dataset, n, k, algorithm),
            **accuracy,
        }
    run = _encrypted_run(circuit, model.d, levels, algorithm, bits, f"{algorithm} n={n} encrypted queries")
    clear_times = [_timed(classify_clear, model.plan, query)[1] for query in levels]
    return {
        **_compiled_fields(model, config, statistics, compile_seconds, dataset, n, k, algorithm),
        **accuracy,
        **run.fields,
        "clear_median_s": round(float(np.median(clear_times)), 6),
        "queries": len(levels),
        "load_average": round(os.getloadavg()[0], 2),  # latencies mean little under a heavy load
        "encrypted_equals_clear": run.answers == classify_clear(model.plan, levels).tolist(),
    }


def _settings(
    n: int | str | None, k: int, bits: int, algorithm: str, dataset: str, owner: bool
) -> KnnSettings:
    """The settings :func:`bench_one` builds with (its docstring)."""
    if isinstance(n, str):
        return replace(owner_settings(dataset), k=k)
    if owner and algorithm == "thermo":
        return replace(owner_settings(dataset), n=n, k=k)
    return KnnSettings(n=n, k=k, bits=bits, algorithm=algorithm)


@dataclass(frozen=True)
class _EncryptedRun:
    fields: dict  # keys, bytes and latencies, as :func:`bench_one`'s row names them
    answers: list[int]  # the decrypted class of every query


def _encrypted_run(
    circuit, d: int, levels: np.ndarray, algorithm: str, bits: int, desc: str
) -> _EncryptedRun:
    """A device's keys, then every query in ``levels`` encrypted, evaluated and decrypted: the
    first on freshly deserialised keys (it pays their preparation), the rest on keys prepared by a
    warm-up query, as registration does."""
    client = KnnClient(circuit.server.client_specs.serialize())
    _, keygen_seconds = _timed(client.generate_keys)
    key_bytes = client.evaluation_keys_bytes()

    # before: the first query on freshly deserialised keys pays their preparation
    cold_keys = parse_evaluation_keys(key_bytes)

    def encrypt(query):
        return client.encrypt(encode_query(algorithm, query, bits))

    ciphertext = encrypt(levels[0])
    result, unprepared = _timed(run_encrypted, circuit.server, cold_keys, parse_ciphertext(ciphertext))
    answers = [client.decrypt_class(result)]
    del cold_keys
    # now: registration prepares the keys with the client's warm-up query
    keys = parse_evaluation_keys(key_bytes)
    warmup = encrypt(np.zeros(d, dtype=np.int64))
    _, preparation = _timed(prepare_keys, circuit.server, keys, warmup)
    latencies = []
    for query in bar(levels[1:], desc=desc, leave=False):
        result, seconds = _timed(run_encrypted, circuit.server, keys, parse_ciphertext(encrypt(query)))
        latencies.append(seconds)
        answers.append(client.decrypt_class(result))
    steady = latencies[1:] or latencies
    fields = {
        "keygen_s": round(keygen_seconds, 2),
        "eval_key_bytes_compressed": len(key_bytes),
        "query_bytes": len(ciphertext),
        "result_bytes": len(result),
        "bytes_per_query": len(ciphertext) + len(result),
        "key_preparation_s": round(preparation, 3),
        "first_query_unprepared_s": round(unprepared, 3),
        "first_query_s": round(latencies[0], 3),
        "server_median_s": round(float(np.median(steady)), 3),
        "server_p90_s": round(float(np.percentile(steady, 90)), 3),
    }
    return _EncryptedRun(fields, answers)


def _compiled_fields(model, config, statistics, compile_seconds, dataset, n, k, algorithm) -> dict:
    """What compilation alone tells (PBS, concrete's cost estimate, key and ciphertext sizes) and
    the machine; a row of either mode starts from these."""
    return {
        "algorithm": algorithm,
        "dataset": dataset,
        "n": n if n is not None else "all",
        "n_kept": model.plan.n,  # a larger n than the training rows keeps them all
        "k": k,
        "bits": model.plan.bits,
        "d": model.d,
        "global_p_error": config.global_p_error,
        "strategy": config.parameter_selection_strategy,
        "pbs_count": statistics["pbs_count"],
        "cost_model_pbs": predicted_pbs(model.plan),
        "pbs_per_point": round(statistics["pbs_count"] / model.plan.n, 2),
        "complexity": f"{statistics['complexity']:.3g}",
        "compile_s": round(compile_seconds, 2),
        "eval_key_bytes_raw": statistics["bootstrap_key_bytes"] + statistics["keyswitch_key_bytes"],
        "query_bytes": statistics["input_bytes"],
        "result_bytes": statistics["output_bytes"],
        "bytes_per_query": statistics["input_bytes"] + statistics["output_bytes"],
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "concrete_python": version("concrete-python"),
    }


def _compiled_row(model, config, statistics, compile_seconds, dataset, n, k, algorithm) -> dict:
    """``--compile-only``: the compiled fields; no keys, no query, so no latency (empty columns)."""
    row: dict[str, object] = dict.fromkeys(COLUMNS, "")
    row.update(_compiled_fields(model, config, statistics, compile_seconds, dataset, n, k, algorithm))
    return row


def predicted_pbs(plan) -> int | str:
    """The thermo family's cost model (``crypto.knn.thermo.cost``); empty for other families."""
    if family_of(plan).name != "thermo":
        return ""
    return cost.count(np.bincount(plan.labels, minlength=plan.n_classes).tolist(), plan.k, plan.spec).total


def cost_model_table(rows: list[dict]) -> str:
    """Per (data set, family): PBS per training point (slope between the smallest and largest n
    measured), seconds per PBS at the largest n, and both extrapolated to 10^5 training points
    (the same per-PBS time: concrete's parameters grow slowly with the PBS count, so this is a
    lower bound)."""
    cells = []
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["algorithm"]), []).append(row)
    for (dataset, algorithm), mine in groups.items():
        mine = sorted(mine, key=lambda r: r["n_kept"])
        low, high = mine[0], mine[-1]
        if high["n_kept"] == low["n_kept"] or algorithm == "paper":
            continue
        slope = (high["pbs_count"] - low["pbs_count"]) / (high["n_kept"] - low["n_kept"])
        at_scale = high["pbs_count"] + slope * (100_000 - high["n_kept"])
        if high["server_median_s"] == "":  # --compile-only: no latency
            timing = ["-", "-"]
        else:
            per_pbs = high["server_median_s"] / high["pbs_count"]
            timing = [f"{per_pbs * 1000:.1f} ms", f"{at_scale * per_pbs:,.0f}"]
        range_kept = f"{low['n_kept']}-{high['n_kept']}"
        cells.append([dataset, algorithm, range_kept, f"{slope:.2f}", *timing, f"{at_scale:,.0f}"])
    header = ["data set", "family", "n range", "PBS per point", "s per PBS at largest n"]
    header += ["s at 10^5 (2 cores)", "PBS at 10^5"]
    return markdown.table(header, cells) + "\n"


def run_bench(
    ns: list[int | str | None],
    queries: int,
    out: Path,
    algorithms: list[str],
    config: CircuitConfig | None = None,
    paper_max_n: int = 40,
    datasets: tuple[str, ...] = ("iris",),
    owner: bool = False,
    fast_max_n: int | None = None,
    compile_only: bool = False,
    accuracy_splits: int = 0,
) -> int:
    """The families side by side; the paper's circuit only up to ``paper_max_n`` (its cost grows
    with n^2: about 55 s per query at n = 40 here, so n = 80 and 160 would take hours), the fast
    one up to ``fast_max_n`` when given. ``None`` in ``ns``: the whole training set."""
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for dataset in datasets:
        for n in bar(ns, desc=f"values of n ({dataset})"):
            for algorithm in algorithms:
                limit = {"paper": paper_max_n, "fast": fast_max_n}.get(algorithm)
                if limit is not None and not (isinstance(n, int) and n <= limit):
                    continue
                rows.append(
                    bench_one(
                        n,
                        queries,
                        algorithm,
                        config,
                        dataset=dataset,
                        owner=owner,
                        compile_only=compile_only,
                        accuracy_splits=accuracy_splits,
                    )
                )
                say(", ".join(f"{c}={rows[-1][c]}" for c in MARKDOWN_COLUMNS))
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    tables = markdown_table(rows) + "\n" + cost_model_table(rows) + "\n" + targets_table(rows)
    out.with_suffix(".md").write_text(tables)
    print(tables)
    print(f"wrote {len(rows)} rows to {out} and {out.with_suffix('.md')}")
    return 0 if all(r["encrypted_equals_clear"] in (True, "") for r in rows) else 1


#: The latency targets per query on 2 cores, at plain k-NN accuracy (seconds).
TARGETS = {"iris": 1.0, "breast_cancer": 15.0, "digits": 60.0}


def targets_table(rows: list[dict]) -> str:
    """Per measured row with a target: met or missed, and what meeting it would take at this run's
    seconds per PBS (the PBS budget, and that budget per kept point)."""
    cells = []
    for row in rows:
        target = TARGETS.get(row["dataset"])
        if target is None or row["server_median_s"] == "":
            continue
        per_pbs = row["server_median_s"] / row["pbs_count"]
        budget = target / per_pbs
        gap = "" if row["accuracy"] == "" else f"{100 * (row['accuracy'] - row['float_knn']):+.1f}"
        status = "met" if row["server_median_s"] <= target else "**missed**"
        cells.append(
            [
                row["dataset"],
                row["n_kept"],
                f"{target:g} s",
                f"{row['server_median_s']} s ({row['load_average']})",
                gap,
                status,
                f"{budget:,.0f}",
                f"{budget / row['n_kept']:.2f} ({row['pbs_per_point']})",
            ]
        )
    header = ["data set", "n kept", "target", "median (load average)", "accuracy - float", "status"]
    header += ["PBS budget at this run's s/PBS", "budget per point (now)"]
    return markdown.table(header, cells) + "\n"


def markdown_table(rows: list[dict]) -> str:
    """The rows' Markdown table, without the columns empty on every row (``--compile-only``: no
    keys, no latency)."""
    if not rows:
        return ""
    columns = [c for c in MARKDOWN_COLUMNS if any(r[c] != "" for r in rows)]
    table = markdown.frame_table(pd.DataFrame(rows, columns=columns))
    machine = f"\n{rows[0]['cores']} cores, {rows[0]['cpu']}, concrete-python {rows[0]['concrete_python']}\n"
    return table + "\n" + machine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--algorithm",
        nargs="+",
        choices=ALGORITHMS,
        default=list(ALGORITHMS),
        help="encrypted k-NN circuit families to measure",
    )
    parser.add_argument(
        "--n",
        type=_n_value,
        nargs="+",
        default=[10, 20, 40],
        help="values of n ('all': the whole training set; 'owner': the owner settings' own choice, "
        "with --owner-settings)",
    )
    parser.add_argument(
        "--dataset", nargs="+", choices=list(BUNDLED), default=["iris"], help="data sets to run on"
    )
    parser.add_argument(
        "--owner-settings", action="store_true", help="thermo with the owner's bits and distance per data set"
    )
    parser.add_argument("--fast-max-n", type=int, default=None, help="largest n for the fast circuit")
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="compile and report PBS, concrete's complexity, key and ciphertext sizes (no keys, no latency)",
    )
    parser.add_argument("--paper-max-n", type=int, default=40, help="largest n for the paper's circuit")
    parser.add_argument(
        "--accuracy-splits",
        type=int,
        default=0,
        help="also the mean accuracy over this many stratified splits beside float k-NN (0: not measured)",
    )
    parser.add_argument("--queries", type=int, default=5, help="encrypted queries per n")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/knn_bench.csv"),
        help="the CSV to write (the Markdown table beside it)",
    )
    parser.add_argument(
        "--sign-bits", type=int, default=CircuitConfig.sign_bits, help="bits of the comparison's sign"
    )
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
    if OWNER_N in args.n and not (args.owner_settings and args.algorithm == ["thermo"]):
        raise BadInput("--n owner needs --owner-settings and --algorithm thermo")
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
    return run_bench(
        args.n,
        args.queries,
        args.out,
        args.algorithm,
        config,
        args.paper_max_n,
        tuple(args.dataset),
        args.owner_settings,
        args.fast_max_n,
        args.compile_only,
        args.accuracy_splits,
    )


def _n_value(text: str) -> int | str | None:
    if text == "all":
        return None
    if text == OWNER_N:
        return OWNER_N
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"n must be an integer, 'all' or 'owner', got {text!r}") from None
