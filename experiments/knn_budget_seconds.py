"""Real-key seconds per query at two error budgets, interleaved so that both see the same load.

On a shared machine a load that changes between two runs swamps the difference between two
budgets (one run after the other measured breast_cancer at 121 s and 116 s while the load average
went from 8 to 14). Here both circuits (the thermo family, the owner's settings, split 0's training
rows, ``server.knn.datasets.owner_settings``) are compiled, keyed and prepared (one warm-up query
each, as a registration does) first; then the same test rows are evaluated under budget A, then
under B, row after row, and each row's ratio A / B is taken from two evaluations seconds apart.
Every decrypted answer is checked against the clear reference.

``--keys-only`` measures no seconds: per variant it compiles, generates keys and records the
evaluation keys' bytes as a client uploads them (concrete's compressed serialisation) beside the
raw sizes; bytes do not depend on the machine's load.

    python -m petlab.experiments.knn_budget_seconds --dataset iris --queries 8 \\
        --budgets 1e-4 1e-2 1e-2:approximate --out results/knn_budget_seconds.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from petlab.crypto.knn.config import circuit_statistics
from petlab.crypto.knn.deployment import KnnClient, parse_ciphertext, parse_evaluation_keys, run_encrypted
from petlab.crypto.knn.families import classify_clear, compile_plan
from petlab.crypto.knn.model import build_model
from petlab.experiments import markdown
from petlab.server.knn.datasets import BUNDLED, bundled_public_bounds, load_bundled, owner_settings
from petlab.server.knn.key_warmup import prepare_keys

COLUMNS = ["dataset", "row", "global_p_error", "rounding", "seconds", "equals_clear", "load_average"]


def parse_variant(text: str) -> tuple[float, str]:
    """``"0.01"`` or ``"0.01:approximate"``: a budget and the rounding of the circuit's truncations."""
    budget, _, rounding = text.partition(":")
    rounding = rounding or "exact"
    if rounding not in ("exact", "approximate"):
        raise argparse.ArgumentTypeError(f"rounding is exact or approximate, not {rounding!r}")
    try:
        return float(budget), rounding
    except ValueError:
        raise argparse.ArgumentTypeError(f"a budget is a number, not {budget!r}") from None


def prepared(name: str, variant: tuple[float, str]):
    """The owner model at ``variant``'s budget and rounding (``KnnSettings.rounding``; approximate
    on a model that truncates nothing is its exact circuit): its compiled circuit, a keyed client
    and prepared keys."""
    budget, rounding = variant
    train, test = load_bundled(name).split(seed=0)
    settings = replace(owner_settings(name), global_p_error=budget, rounding=rounding)
    bounds = bundled_public_bounds(name)
    model = build_model(name, train.features, train.labels, settings, public_bounds=bounds)
    circuit = compile_plan(model.plan, model.circuit_config())
    client = KnnClient(circuit.server.client_specs.serialize())
    client.generate_keys()
    keys = parse_evaluation_keys(client.evaluation_keys_bytes())
    prepare_keys(circuit.server, keys, client.encrypt(model.encode(np.zeros(model.d, dtype=np.int64))))
    return model, circuit, client, keys, model.quantizer.transform(test.features)


Variant = tuple[float, str]
KEY_COLUMNS = [
    "dataset",
    "global_p_error",
    "rounding",
    "pbs_count",
    "complexity",
    "raw_key_bytes",
    "upload_bytes",
]


def keys_table(rows: list[dict]) -> str:
    """``--keys-only``'s rows in Markdown, bytes in MB (10^6)."""
    head = ["data set", "global_p_error", "rounding", "PBS", "complexity", "keys raw", "keys as uploaded"]
    table = [
        [
            r["dataset"],
            f"{float(r['global_p_error']):g}",
            r["rounding"],
            f"{int(r['pbs_count']):,}",
            f"{float(r['complexity']):.3g}",
            f"{int(r['raw_key_bytes']) / 1e6:,.0f} MB",
            f"{int(r['upload_bytes']) / 1e6:,.1f} MB",
        ]
        for r in rows
    ]
    return markdown.table(head, table) + "\n"


def key_sizes(name: str, variant: Variant) -> dict:
    """The owner model at ``variant`` (split 0's training rows): its cost figures and the bytes of a
    fresh client's evaluation keys as uploaded."""
    budget, rounding = variant
    train, _ = load_bundled(name).split(seed=0)
    settings = replace(owner_settings(name), global_p_error=budget, rounding=rounding)
    model = build_model(
        name, train.features, train.labels, settings, public_bounds=bundled_public_bounds(name)
    )
    circuit = compile_plan(model.plan, model.circuit_config())
    client = KnnClient(circuit.server.client_specs.serialize())
    client.generate_keys()
    stats = circuit_statistics(circuit)
    return {
        "dataset": name,
        "global_p_error": budget,
        "rounding": model.rounding,
        "pbs_count": stats["pbs_count"],
        "complexity": f"{stats['complexity']:.3e}",
        "raw_key_bytes": stats["bootstrap_key_bytes"] + stats["keyswitch_key_bytes"],
        "upload_bytes": len(client.evaluation_keys_bytes()),
    }


def interleaved(name: str, variants: list[Variant], queries: int) -> tuple[list[dict], dict]:
    setups = {variant: prepared(name, variant) for variant in variants}
    statistics = {variant: circuit_statistics(setups[variant][1]) for variant in variants}
    rows = []
    for index in range(queries):
        for variant in variants:
            model, circuit, client, keys, levels = setups[variant]
            query = parse_ciphertext(client.encrypt(model.encode(levels[index])))
            started = time.perf_counter()
            result = run_encrypted(circuit.server, keys, query)
            seconds = time.perf_counter() - started
            clear = int(classify_clear(model.plan, levels[index : index + 1])[0])
            rows.append(
                {
                    "dataset": name,
                    "row": index,
                    "global_p_error": variant[0],
                    "rounding": variant[1],
                    "seconds": round(seconds, 3),
                    "equals_clear": client.decrypt_class(result) == clear,
                    "load_average": round(os.getloadavg()[0], 2),
                }
            )
            print(rows[-1], flush=True)
    return rows, statistics


def summary_table(rows: list[dict], variants: list[Variant]) -> str:
    """Per data set: the median seconds per variant and the median of the per-row ratios to the
    first variant."""
    head = [
        "data set",
        "global_p_error",
        "rounding",
        "queries",
        "median s",
        "median per-row ratio",
        "load average",
        "answers",
    ]
    table = []
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]

        def of(variant: Variant, mine: list[dict] = mine) -> list[dict]:
            return [r for r in mine if (float(r["global_p_error"]), r["rounding"]) == variant]

        base = {r["row"]: float(r["seconds"]) for r in of(variants[0])}
        first = f"{variants[0][0]:g} {variants[0][1]}"
        for variant in variants:
            these = of(variant)
            ratio = np.median([base[r["row"]] / float(r["seconds"]) for r in these])
            loads = [float(r["load_average"]) for r in these]
            equal = sum(str(r["equals_clear"]) == "True" for r in these)
            table.append(
                [
                    name,
                    f"{variant[0]:g}",
                    variant[1],
                    str(len(these)),
                    f"{np.median([float(r['seconds']) for r in these]):.2f}",
                    f"{ratio:.2f}x faster than {first}" if variant != variants[0] else "1",
                    f"{min(loads):.1f}-{max(loads):.1f}",
                    f"{equal} of {len(these)} equal the clear reference",
                ]
            )
    return markdown.table(head, table) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", nargs="+", choices=sorted(BUNDLED), default=["iris"], help="data sets")
    parser.add_argument(
        "--budgets",
        nargs="+",
        type=parse_variant,
        default=[(1e-4, "exact"), (1e-2, "exact")],
        help="global_p_error values, each optionally with :approximate (concrete's approximate "
        "rounding in place of the exact truncations), e.g. 1e-4 0.1 0.01:approximate",
    )
    parser.add_argument("--queries", type=int, default=4, help="test rows evaluated under every budget")
    parser.add_argument("--out", type=Path, default=Path("results/knn_budget_seconds.csv"), help="the CSV")
    parser.add_argument(
        "--keys-only",
        action="store_true",
        help="no timings: each variant's evaluation key bytes (module doc)",
    )
    args = parser.parse_args(argv)
    if args.keys_only:
        sizes: list[dict] = []
        for name in args.dataset:
            for variant in args.budgets:
                row = key_sizes(name, variant)
                key = (row["dataset"], row["global_p_error"], row["rounding"])
                if any((r["dataset"], r["global_p_error"], r["rounding"]) == key for r in sizes):
                    continue  # approximate rounding of a model that truncates nothing: its exact circuit
                sizes.append(row)
                print(row, flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=KEY_COLUMNS)
            writer.writeheader()
            writer.writerows(sizes)
        table = keys_table(sizes)
        args.out.with_suffix(".md").write_text(table)
        print(table)
        return 0
    rows: list[dict] = []
    for name in args.dataset:
        found, statistics = interleaved(name, args.budgets, args.queries)
        rows += found
        print(name, statistics, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    table = summary_table(rows, args.budgets)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
