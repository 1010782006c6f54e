"""Where an encrypted k-NN query's seconds go: the thermo circuit's stages timed as prefixes.

``knn-bench`` counts PBS by kind (``crypto.knn.thermo.cost``); this measures what each kind costs
on this machine. It compiles, with the owner's settings and the family's configuration, one circuit
per prefix of the query's steps (``crypto.knn.thermo.circuit.DISTANCE_STAGES``):

1. the raw distances, ``code @ weights + offsets`` (a clear matrix product, no PBS);
2. + the exact truncation of their ``shift`` low bits (one small PBS per bit and point);
3. + the saturating reduction (one lookup per point): the circuit's distances;
4. the whole circuit (+ the selection network, the votes and the winner),

generates real keys for each, runs one warm-up query and then times ``--queries`` queries. Every
decrypted output is checked against the clear computation of the same prefix (the whole circuit's
against the clear reference's class). A stage's cost is the difference between consecutive
prefixes; concrete chooses parameters per circuit (a longer circuit needs a smaller error per
PBS), so the differences are close to, not exactly, what each stage costs inside the whole
circuit::

    python -m petlab.experiments.knn_stages --dataset breast_cancer --queries 2
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from concrete import fhe

from petlab.crypto.knn.families import classify_clear, default_config
from petlab.crypto.knn.model import KnnModel, build_model
from petlab.crypto.knn.thermo.circuit import circuit_function, compile_inputset, distance_function
from petlab.experiments import markdown
from petlab.server.knn.datasets import BUNDLED, bundled_public_bounds, load_bundled, owner_settings

STAGE_NAMES = {
    "raw": "raw distances (clear matrix product)",
    "truncated": "+ exact truncation",
    "reduced": "+ saturating reduction",
    "whole": "+ selection network, votes, winner (whole circuit)",
}


def owner_model(dataset: str, n: int | None = None) -> KnnModel:
    """The owner's model on split 0's training rows (its own n unless ``n`` is given)."""
    train, _ = load_bundled(dataset).split()
    settings = owner_settings(dataset) if n is None else replace(owner_settings(dataset), n=n, condense=None)
    bounds = bundled_public_bounds(dataset)
    return build_model(dataset, train.features, train.labels, settings, public_bounds=bounds)


def clear_stage(model: KnnModel, stage: str, codes: np.ndarray) -> np.ndarray:
    """What the distance prefix ending at ``stage`` computes, in the clear, for each code (rows)."""
    plan = model.plan
    raw = codes @ plan.weights + plan.offsets
    if stage == "raw":
        return raw
    if stage == "truncated":
        return raw - raw % (1 << plan.spec.shift)
    return plan.spec.reduce(raw)


def stages_of(model: KnnModel) -> list[tuple[str, Callable]]:
    """The prefixes this model's circuit has (no truncation stage when ``shift`` is 0, no
    reduction stage when raw distances already fit)."""
    plan = model.plan
    spec = plan.spec
    names = ["raw"]
    if spec.reduced and spec.shift:
        names.append("truncated")
    if spec.reduced:
        names.append("reduced")
    functions = [(name, distance_function(spec, plan.weights, plan.offsets, name)) for name in names]
    return [*functions, ("whole", circuit_function(plan))]


def measure(dataset: str, queries: int, n: int | None = None) -> list[dict]:
    """One row per prefix: PBS, concrete's complexity, the median seconds of ``queries`` timed
    queries after a warm-up, and the increments over the previous prefix."""
    model = owner_model(dataset, n)
    _, test = load_bundled(dataset).split()
    levels = model.quantizer.transform(test.features)[: queries + 1]
    codes = np.stack([model.encode(level) for level in levels])
    config = default_config("thermo").concrete_configuration()
    rows: list[dict] = []
    for stage, function in stages_of(model):
        started = time.perf_counter()
        circuit = fhe.Compiler(function, {"code": "encrypted"}).compile(compile_inputset(model.plan), config)
        compile_seconds = time.perf_counter() - started
        circuit.keygen()
        want = classify_clear(model.plan, levels) if stage == "whole" else clear_stage(model, stage, codes)
        seconds = []
        for index, code in enumerate(codes):
            encrypted = circuit.encrypt(code)
            started = time.perf_counter()
            result = circuit.run(encrypted)
            if index:  # the first run is the warm-up
                seconds.append(time.perf_counter() - started)
            got = np.asarray(circuit.decrypt(result))
            if not np.array_equal(got, np.asarray(want[index])):
                raise AssertionError(f"{dataset}, {stage}: the encrypted output differs from the clear one")
        median = statistics.median(seconds)
        previous = rows[-1] if rows else {"pbs": 0, "median_s": 0.0}
        added = circuit.programmable_bootstrap_count - previous["pbs"]
        rows.append(
            {
                "dataset": dataset,
                "n": model.plan.n,
                "stage": STAGE_NAMES[stage],
                "pbs": circuit.programmable_bootstrap_count,
                "complexity": f"{circuit.complexity:.3g}",
                "compile_s": round(compile_seconds, 1),
                "median_s": round(median, 2),
                "added_pbs": added,
                "added_s": round(median - previous["median_s"], 2),
                "ms_per_added_pbs": round(1000 * (median - previous["median_s"]) / added, 1) if added else "",
                "load_average": round(os.getloadavg()[0], 2),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=list(BUNDLED), default="breast_cancer")
    parser.add_argument("--queries", type=int, default=2, help="timed queries per prefix (after a warm-up)")
    parser.add_argument("--n", type=int, default=None, help="points kept (default: the owner's choice)")
    parser.add_argument(
        "--out", type=Path, default=None, help="a CSV to write (the Markdown table beside it)"
    )
    args = parser.parse_args(argv)
    if args.queries < 1:
        parser.error("--queries must be at least 1")
    rows = measure(args.dataset, args.queries, args.n)
    table = markdown.frame_table(pd.DataFrame(rows))
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        args.out.with_suffix(".md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
