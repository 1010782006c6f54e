"""The error budget's trade-off: what concrete's ``global_p_error`` costs and what it changes.

For each bundled data set (the thermo family with the owner's settings,
``server.knn.datasets.owner_settings``) and each variant, an error budget and the rounding of the
distances' truncation (``KnnSettings.rounding``: exact, or concrete's approximate rounding; a data
set whose distances are not truncated has only the exact variant):

- **cost**, from split 0's model compiled for simulation only (concrete's optimizer picks the
  parameters before it knows whether keys will be made: the same complexity as a compilation for
  execution, e.g. 1.70e11 for breast_cancer at 0.1 in both): PBS count, concrete's complexity (its
  cost estimate, load-independent), the raw bootstrap and key-switching key bytes;
- **answers**, over every test row of ``--splits`` stratified 80/20 splits: each split's model is
  compiled with ``fhe_simulation=True`` at the variant and every test row is run ``--repeats``
  times by ``circuit.simulate`` (each run draws its own lookup errors); *agreement* is the share
  of answers equal to the clear reference of the exact integer algorithm (``classify_clear``, what
  an error-free exact evaluation answers; for approximate rounding too), *accuracy* the share
  equal to the true label, beside float k-NN (``knn_accuracy.float_knn_accuracy``). Each row
  records its compile and simulation seconds.

concrete's simulation models the lookups' errors: with ``fhe_simulation=True`` it adds to every
lookup's input the noise that the compiled parameters leave, so a lookup reads a neighbouring
table entry with the compiled probability. :func:`simulated_lookup_errors` measures this on one
4-bit identity lookup compiled at a stated per-lookup ``p_error`` (the wrong share of its outputs
tracks the compiled probability, and is 0 at a tiny one); its figures are written beside the
sweep's (``results/knn_budget_check.md``). The same holds for approximate rounding's off-centred
steps: :func:`simulated_rounding_errors` rounds every 6-bit value approximately by 2 bits, with real
keys and in simulation, and counts the results one step off round-to-nearest in each.

:func:`chosen_settings` applies the rule the owner settings come from: per data set, the cheapest
variant (concrete's complexity) whose mean accuracy is within one point of float k-NN and whose
agreement with the exact clear reference is at least 99.5 % with 95 % confidence: the one-sided
Clopper-Pearson lower bound on the agreement of the simulated answers, so that a variant is not
chosen on a share that its sample cannot tell from a lower one. Real-key seconds are measured by
``experiments/knn_budget_seconds.py`` (docs/explanation/knn-speed.md).

    python -m petlab.experiments.knn_budget --dataset iris wine breast_cancer digits \\
        --budgets 1e-4 1e-2 1e-1 1e-2:approximate 1e-1:approximate --splits 10 \\
        --out results/knn_budget.csv
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from concrete import fhe
from scipy import stats

from petlab.crypto.knn.config import circuit_statistics
from petlab.crypto.knn.families import classify_clear, compile_plan
from petlab.crypto.knn.model import build_model
from petlab.experiments import markdown
from petlab.experiments.knn_accuracy import float_knn_accuracy
from petlab.experiments.knn_budget_seconds import parse_variant
from petlab.server.knn.datasets import BUNDLED, bundled_public_bounds, load_bundled, owner_settings

COLUMNS = [
    "dataset",
    "global_p_error",
    "rounding",
    "split",
    "n_kept",
    "test_rows",
    "trials",
    "pbs_count",
    "complexity",
    "bootstrap_key_bytes",
    "keyswitch_key_bytes",
    "agree",
    "correct",
    "float_knn",
    "compile_s",
    "simulate_s",
]
# the owner settings' rule: accuracy within this of float k-NN, agreement at least this
ACCURACY_MARGIN = 0.01
MIN_AGREEMENT = 0.995


def split_row(name: str, budget: float, seed: int, rounding: str = "exact", repeats: int = 1) -> dict | None:
    """One (data set, variant, split): the cost figures of that split's circuit and its simulated
    answers on every test row. ``rounding="approximate"``: the owner's circuit with concrete's
    approximate rounding in place of the exact truncation (``KnnSettings.rounding``), its answers
    still compared with the exact algorithm's clear reference; None when the model truncates
    nothing (its circuit is the exact one). Every test row is simulated ``repeats`` times (each
    simulation draws its own lookup errors): ``trials`` answers."""
    train, test = load_bundled(name).split(seed=seed)
    settings = replace(owner_settings(name), global_p_error=budget, rounding=rounding)
    bounds = bundled_public_bounds(name)
    model = build_model(name, train.features, train.labels, settings, public_bounds=bounds)
    if model.rounding != rounding:
        return None
    started = time.perf_counter()
    circuit = compile_plan(model.plan, model.circuit_config(), simulation=True, execution=False)
    compile_s = time.perf_counter() - started
    levels = model.quantizer.transform(test.features)
    clear = classify_clear(model.plan, levels)
    codes = model.encode(levels)
    started = time.perf_counter()
    simulated = np.array([[int(circuit.simulate(code)) for code in codes] for _ in range(repeats)])
    simulate_s = time.perf_counter() - started
    stats = circuit_statistics(circuit)
    return {
        "dataset": name,
        "global_p_error": budget,
        "rounding": rounding,
        "split": seed,
        "n_kept": model.plan.n,
        "test_rows": len(test.labels),
        "trials": simulated.size,
        "pbs_count": stats["pbs_count"],
        "complexity": f"{stats['complexity']:.3e}",
        "bootstrap_key_bytes": stats["bootstrap_key_bytes"],
        "keyswitch_key_bytes": stats["keyswitch_key_bytes"],
        "agree": int(np.sum(simulated == clear[None, :])),
        "correct": int(np.sum(simulated == test.labels[None, :])),
        "float_knn": round(float_knn_accuracy(name, seed, model.plan.k), 4),
        "compile_s": round(compile_s, 2),
        "simulate_s": round(simulate_s, 2),
    }


def summarize(rows: list[dict]) -> list[dict]:
    """Per (data set, budget): split 0's cost, and agreement and accuracy over all test rows of
    every split (float k-NN: the mean over the same splits)."""
    summary = []

    def key_of(row: dict) -> tuple[str, float, str]:
        return row["dataset"], float(row["global_p_error"]), row["rounding"]

    for key in dict.fromkeys(key_of(r) for r in rows):
        mine = [r for r in rows if key_of(r) == key]
        first = min(mine, key=lambda r: int(r["split"]))
        rows_seen = sum(int(r["test_rows"]) for r in mine)
        total = sum(int(r["trials"]) for r in mine)
        summary.append(
            {
                "dataset": key[0],
                "global_p_error": key[1],
                "rounding": key[2],
                "splits": len(mine),
                "test_rows": rows_seen,
                "trials": total,
                "n_kept": int(first["n_kept"]),
                "pbs_count": int(first["pbs_count"]),
                "complexity": float(first["complexity"]),
                "key_bytes": int(first["bootstrap_key_bytes"]) + int(first["keyswitch_key_bytes"]),
                "agree": sum(int(r["agree"]) for r in mine),
                "agreement": sum(int(r["agree"]) for r in mine) / total,
                "accuracy": sum(int(r["correct"]) for r in mine) / total,
                "float_knn": float(np.mean([float(r["float_knn"]) for r in mine])),
            }
        )
    return summary


def agreement_lower_bound(agree: int, total: int, confidence: float = 0.95) -> float:
    """The one-sided Clopper-Pearson lower confidence bound on the share of answers that agree,
    from ``agree`` of ``total`` (exact: the beta quantile; ``alpha ** (1 / total)`` when all agree)."""
    if agree == 0:
        return 0.0
    return float(stats.beta.ppf(1 - confidence, agree, total - agree + 1))


def meets(entry: dict) -> bool:
    """The owner settings' bar: within one point of float k-NN, and agreement at least 99.5 % with
    95 % confidence (:func:`agreement_lower_bound`)."""
    within = entry["accuracy"] >= entry["float_knn"] - ACCURACY_MARGIN
    return within and agreement_lower_bound(entry["agree"], entry["trials"]) >= MIN_AGREEMENT


def chosen_settings(summary: list[dict]) -> dict[str, tuple[float, str]]:
    """Per data set, the (budget, rounding) of least complexity among the variants that meet the
    bar (none: the data set is left out; on a tie, the larger budget, then exact rounding, whose
    answers the device can bound). Approximate rounding competes like any other variant: its
    agreement is measured against the exact algorithm's clear reference, and the device states
    that its answers are not bounded by the budget (``client.knn_client.answer_guarantee``)."""
    chosen = {}
    for name in dict.fromkeys(e["dataset"] for e in summary):
        passing = [e for e in summary if e["dataset"] == name and meets(e)]
        if passing:
            best = min(
                passing,
                key=lambda e: (e["complexity"], -e["global_p_error"], e["rounding"] != "exact"),
            )
            chosen[name] = (best["global_p_error"], best["rounding"])
    return chosen


def summary_table(summary: list[dict]) -> str:
    chosen = chosen_settings(summary)
    base = {
        e["dataset"]: e["complexity"]
        for e in summary
        if e["global_p_error"] == 1e-4 and e["rounding"] == "exact"
    }
    head = [
        "data set",
        "global_p_error",
        "truncation",
        "PBS",
        "complexity",
        "vs 1e-4",
        "keys (raw)",
        "splits (test rows, simulated answers)",
        "agreement (95 % lower bound)",
        "accuracy (float k-NN)",
        "meets the bar",
    ]
    table = []
    for e in summary:
        ratio = f"{base[e['dataset']] / e['complexity']:.2f}x less" if e["dataset"] in base else ""
        if e["global_p_error"] == 1e-4 and e["rounding"] == "exact":
            ratio = "(baseline)"
        mark = "yes" if meets(e) else "no"
        lower = agreement_lower_bound(e["agree"], e["trials"])
        if chosen.get(e["dataset"]) == (e["global_p_error"], e["rounding"]):
            mark = "**yes: chosen**"
        table.append(
            [
                e["dataset"],
                f"{e['global_p_error']:g}",
                e["rounding"],
                f"{e['pbs_count']:,}",
                f"{e['complexity']:.3g}",
                ratio,
                f"{e['key_bytes'] / 1e6:,.0f} MB",
                f"{e['splits']} ({e['test_rows']:,} rows, {e['trials']:,} answers)",
                f"{100 * e['agreement']:.2f} % ({100 * lower:.2f} %)",
                f"{e['accuracy']:.3f} ({e['float_knn']:.3f})",
                mark,
            ]
        )
    return markdown.table(head, table) + "\n"


def simulated_lookup_errors(p_error: float, values: int = 64, runs: int = 50, seed: int = 0) -> dict:
    """Does ``circuit.simulate`` inject lookup errors? One 4-bit identity lookup on ``values``
    encrypted inputs compiled at per-lookup ``p_error`` with ``fhe_simulation=True``, simulated
    ``runs`` times on random inputs: the share of outputs that differ from their input."""
    identity = fhe.LookupTable(list(range(16)))
    compiler = fhe.Compiler(lambda x: identity[x], {"x": "encrypted"})
    inputs = [np.arange(values) % 16, np.full(values, 15)]
    configuration = fhe.Configuration(
        p_error=p_error, global_p_error=None, fhe_simulation=True, fhe_execution=False, show_progress=False
    )
    circuit = compiler.compile(inputs, configuration)
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(runs):
        x = rng.integers(0, 16, size=values)
        wrong += int(np.sum(circuit.simulate(x) != x))
    return {"p_error": p_error, "compiled_p_error": circuit.p_error, "outputs": values * runs, "wrong": wrong}


def simulated_rounding_errors(runs: int = 20, p_error: float = 0.01, seed: int = 0) -> dict:
    """Does ``circuit.simulate`` model approximate rounding's off-centred steps? Every 6-bit value
    0..63, rounded approximately by 2 bits and read through the table ``v >> 2`` (as the thermo
    reduction reads it), compiled once with real keys at ``p_error`` per lookup, then run ``runs``
    times encrypted and ``runs`` times simulated: in each, the outputs one step off round-to-nearest
    (``(x + 2) >> 2``) and those further off."""
    lookup = fhe.univariate(lambda v: v >> 2)

    def rounded(x):
        return lookup(fhe.round_bit_pattern(x, 2, exactness=fhe.Exactness.APPROXIMATE))

    compiler = fhe.Compiler(rounded, {"x": "encrypted"})
    values = np.arange(64)
    configuration = fhe.Configuration(
        p_error=p_error, global_p_error=None, fhe_simulation=True, show_progress=False
    )
    circuit = compiler.compile([values, np.full(64, 63)], configuration)
    circuit.keygen(seed=seed)
    nearest = (values + 2) >> 2
    out = {"p_error": p_error, "outputs": 64 * runs}
    for mode, evaluate in (
        ("encrypted", lambda: circuit.decrypt(circuit.run(circuit.encrypt(values)))),
        ("simulated", lambda: circuit.simulate(values)),
    ):
        off = np.abs(np.array([evaluate() for _ in range(runs)]) - nearest[None, :])
        out[f"{mode}_one_off"] = int(np.sum(off == 1))
        out[f"{mode}_further"] = int(np.sum(off > 1))
    return out


def rounding_check_table(check: dict) -> str:
    head = ["evaluation", "outputs", "one step off round-to-nearest", "share", "further off"]
    rows = [
        [
            mode,
            f"{check['outputs']:,}",
            f"{check[f'{mode}_one_off']:,}",
            f"{check[f'{mode}_one_off'] / check['outputs']:.3f}",
            f"{check[f'{mode}_further']:,}",
        ]
        for mode in ("encrypted", "simulated")
    ]
    return markdown.table(head, rows) + "\n"


def check_table(checks: list[dict]) -> str:
    head = ["requested p_error per lookup", "concrete's compiled p_error", "outputs", "wrong", "share wrong"]
    rows = [
        [
            f"{c['p_error']:g}",
            f"{c['compiled_p_error']:.3g}",
            f"{c['outputs']:,}",
            f"{c['wrong']:,}",
            f"{c['wrong'] / c['outputs']:.4f}",
        ]
        for c in checks
    ]
    return markdown.table(head, rows) + "\n"


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    # argparse converts given values only: the default's strings here
    variants = [parse_variant(v) if isinstance(v, str) else v for v in args.budgets]
    out.parent.mkdir(parents=True, exist_ok=True)
    done = read_rows(out) if args.resume and out.exists() else []
    seen = {(r["dataset"], float(r["global_p_error"]), r["rounding"], int(r["split"])) for r in done}
    if not args.no_check:
        checks = [simulated_lookup_errors(p) for p in (0.1, 0.01, 1e-9)]
        text = check_table(checks) + "\n" + rounding_check_table(simulated_rounding_errors())
        out.with_name(out.stem + "_check.md").write_text(text)
        print(text, flush=True)
    with out.open("w", newline="") as handle:  # rows of an older layout get the new columns
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(done)
        handle.flush()
        for name in args.dataset:  # split by split, so that a cut-short run covers every variant
            for seed in range(args.first_split, args.splits):
                for budget, rounding in variants:
                    if (name, budget, rounding, seed) in seen:
                        continue
                    row = split_row(name, budget, seed, rounding, args.repeats)
                    if row is None:
                        continue
                    writer.writerow(row)
                    handle.flush()
                    print(row, flush=True)
    summary = summarize(read_rows(out))
    table = summary_table(summary)
    out.with_suffix(".md").write_text(table)
    print(table)
    print("chosen:", chosen_settings(summary))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset", nargs="+", choices=sorted(BUNDLED), default=list(BUNDLED), help="bundled data sets"
    )
    parser.add_argument(
        "--budgets",
        nargs="+",
        type=parse_variant,
        default=["1e-4", "1e-2", "0.1", "1e-2:approximate", "0.1:approximate"],
        help="global_p_error values, each optionally with :approximate (concrete's approximate "
        "rounding in place of the exact truncation), e.g. 1e-4 0.1 0.01:approximate",
    )
    parser.add_argument("--splits", type=int, default=10, help="stratified 80/20 splits (seeds 0..)")
    parser.add_argument(
        "--first-split",
        type=int,
        default=0,
        help="start at this seed (several processes can share the splits, each with its own --out)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="simulations of every test row (fresh lookup errors each)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/knn_budget.csv"),
        help="the CSV to write (the Markdown table and the simulation check beside it)",
    )
    parser.add_argument("--resume", action="store_true", help="keep the rows already in --out")
    parser.add_argument("--no-check", action="store_true", help="skip the simulation check")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
