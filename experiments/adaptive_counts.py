"""Does adaptive synthesis write as many points as there are real ones?

On simulated commute data (workers as points of [0, 1]^4, Section 5.1 of "Synthetic Data via
Differential Privacy"), for each eps: the improved adaptive histogram, leaf re-measurement and
representatives per leaf, with the paper's per-leaf round(max(0, count)) and with the leaf counts
centered on their noisy sum (``synthesize_from_counts``, the default); and direct synthesis with
count centering (Figures 3-4). Reports the number of synthetic points against the real count and
the multi-scale earthmover approximation per real point at depths 3 to 6. Seeded noise: an
evaluation, not a release.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from petlab.experiments import markdown
from petlab.experiments.report import EVALUATION_NOTICE
from petlab.experiments.synthesis_experiments import commute_points
from petlab.plaindata.adaptive.hierarchies import Quadtree
from petlab.plaindata.adaptive.histograms import (
    default_threshold,
    direct_synthesis,
    direct_synthesis_cost,
    improved_cost,
    improved_histogram,
    leaf_measurement_cost,
    measure_leaves,
    synthesize_from_counts,
)
from petlab.plaindata.dp.composition import sequential
from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.dp.privacy_cost import epsilon_text
from petlab.plaindata.metrics.commute import earthmover_approximation

DEPTHS = (3, 4, 5, 6)


def run_counts(workers: int, seed: int, epsilons: list[float], out: Path) -> int:
    points = commute_points(workers, seed)
    rows = []
    for eps in epsilons:
        domain, noise = Quadtree(4), SeededNoise(seed)
        tree = improved_histogram(points, domain, eps, default_threshold(eps, domain.branching), noise=noise)
        counts = measure_leaves(points, domain, tree, eps, noise)
        outputs = {
            "leaf counts, round(max(0, c)) (paper)": synthesize_from_counts(
                domain, counts, np.random.default_rng(seed), centered=False
            ),
            "leaf counts centered on their sum": synthesize_from_counts(
                domain, counts, np.random.default_rng(seed)
            ),
            "direct synthesis (Figures 3-4), depth 8": direct_synthesis(
                points, domain, eps, 8, np.random.default_rng(seed), SeededNoise(seed + 1)
            ),
        }
        histogram = sequential([improved_cost(eps), leaf_measurement_cost(eps)])
        totals = {"direct synthesis (Figures 3-4), depth 8": direct_synthesis_cost(eps, 8)}
        for method, synthetic in outputs.items():
            emd = earthmover_approximation(points, synthetic, max(DEPTHS)) / len(points)
            row = {
                "eps": eps,
                "total_eps": totals.get(method, histogram).epsilon,  # from the cost objects
                "method": method,
                "leaves": len(counts),
                "real": len(points),
                "synthetic": len(synthetic),
            }
            row.update({f"emd_depth_{d}": round(float(emd[d]), 4) for d in DEPTHS})
            rows.append(row)
            print(row, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out.with_suffix(".md").write_text(_markdown(rows, len(points), seed))
    return 0


def _markdown(rows: list[dict], real_points: int, seed: int) -> str:
    lines = [
        "# Adaptive synthesis: synthetic against real point counts",
        "",
        EVALUATION_NOTICE,
        "",
        f"{real_points:,} real points (simulated commute data, seed {seed}); earthmover per real point.",
        "",
        "Total eps: the release's (eps, 0)-DP, neighbours one worker added or removed (cost objects).",
        "",
        markdown.table(
            [
                "eps",
                "total eps",
                "method",
                "leaves",
                "synthetic / real",
                "EMD depth " + " / ".join(map(str, DEPTHS)),
            ],
            (
                [
                    row["eps"],
                    epsilon_text(float(row["total_eps"])),
                    row["method"],
                    f"{row['leaves']:,}",
                    f"{row['synthetic']:,} / {row['real']:,}",
                    " / ".join(f"{row[f'emd_depth_{d}']:.3f}" for d in DEPTHS),
                ]
                for row in rows
            ),
        ),
    ]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers", type=int, default=20_000, help="workers (jobs) in the generated commute data"
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument(
        "--eps", type=float, nargs="+", default=[0.1, 0.5, 1.0], help="values of epsilon to compare"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("results/adaptive_counts.md"), help="the Markdown table to write"
    )


def run(args: argparse.Namespace) -> int:
    return run_counts(args.workers, args.seed, args.eps, args.out)
