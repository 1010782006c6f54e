"""ICDE 2008 Figures 1-4 on the 1.5M-worker benchmark, and the prior mass beside the paper's.

Machanavajjhala et al. (ICDE 2008), Section VI: 120 destination blocks chosen uniformly at
random; for each, the average commute distance in the real data and in the synthetic data,
plotted against the number of workers of the block; all commutes (Figures 1 and 3) and commutes
shorter than the median (Figures 2 and 4); origins within 200 miles (experiment 1: min alpha
0.01245, 419 job holders added per destination) and within 100 miles (experiment 2: min alpha
0.039764). eps = 4.6, delta = 1e-5 throughout, as in the paper.

The data are this project's synthetic LODES-style commute data (``petlab-synth commute-data``, 1.5
million workers over 233,726 blocks, seed 1), not Minnesota's: the figures show the mechanism's
behaviour, not the paper's state. Every figure here is computed from (simulated) confidential data
and is an evaluation, not a release.

Prior mass added per destination: |alpha(d)| = alpha(d) x (blocks in the kept domain), the number
of "additional primary job holders" the paper reports. Configurations:

* ``200mi``: the default bands (keep probability down to 0.0378 at 100-200 miles, as the paper);
* ``100mi``: the same bands up to 100 miles (the paper's experiment 2);
* ``100mi-lean``: up to 100 miles, keeping 20% of the empty blocks at 2-5 miles and the paper's
  minimum 0.0378 beyond, so Theorem 5.2's eps' is the paper's 8.6;
* ``200mi-dropped``, ``100mi-dropped``: the ``200mi`` and ``100mi`` bands on the data with the
  pairs beyond the last band removed first (n(d) then counts
  the workers inside only, a confidential figure: NOT a private release). Beside ``200mi`` and
  ``100mi`` they measure the utility cost of the beyond cell, which keeps N(d), the public total,
  and draws the workers beyond like any other cell.

``written share``: synthetic workers written over all real workers (the workers drawn beyond the
last band are not written); ``real inside share``: real workers within the last band over all.
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from petlab.experiments import markdown
from petlab.experiments.report import EVALUATION_NOTICE
from petlab.plaindata.dp.privacy_cost import epsilon_text
from petlab.plaindata.metrics.commute import commute_miles
from petlab.plaindata.onthemap.block_grid import BlockGrid
from petlab.plaindata.onthemap.commute_data import generate
from petlab.plaindata.onthemap.release import DistanceBands, release

EPSILON, DELTA = 4.6, 1e-5
PAPER: dict[str, dict[str, float | None]] = {
    "200mi": {"added": 419.0, "min_alpha": 0.01245},
    "100mi": {"added": None, "min_alpha": 0.039764},
}
CONFIGURATIONS = {
    "200mi": DistanceBands(),
    "100mi": DistanceBands(
        edges_miles=(0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0), keep=(1.0, 0.6, 0.3, 0.15, 0.08, 0.05)
    ),
    "100mi-lean": DistanceBands(
        edges_miles=(0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0), keep=(1.0, 0.2, 0.0378, 0.0378, 0.0378, 0.0378)
    ),
    "200mi-dropped": DistanceBands(),
    "100mi-dropped": DistanceBands(
        edges_miles=(0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0), keep=(1.0, 0.6, 0.3, 0.15, 0.08, 0.05)
    ),
}
DROPPED = ("200mi-dropped", "100mi-dropped")  # pairs beyond the last band removed first
NOT_PRIVATE = "not private"


@dataclass(frozen=True)
class Commutes:
    destination: np.ndarray
    origin: np.ndarray
    count: np.ndarray
    miles: np.ndarray


def _per_destination(
    commutes: Commutes, destinations: np.ndarray, shorter_than: float | None
) -> pd.DataFrame:
    keep = np.isin(commutes.destination, destinations)
    if shorter_than is not None:
        keep &= commutes.miles < shorter_than
    frame = pd.DataFrame(
        {
            "d": commutes.destination[keep],
            "w": commutes.count[keep].astype(float),
            "wm": commutes.miles[keep] * commutes.count[keep],
        }
    )
    sums = frame.groupby("d")[["w", "wm"]].sum()
    return pd.DataFrame({"workers": sums.w, "average_miles": sums.wm / sums.w}).reindex(destinations)


def run_figures(workers: int, seed: int, sample: int, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    print(f"generating {workers} workers (seed {seed}) ...", flush=True)
    state = _state(generate(workers, seed, blocks_per_worker=233_726 / workers, show_progress=True))
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(np.unique(state.real.destination), size=sample, replace=False))
    summary, per_block = [], []
    for name, bands in CONFIGURATIONS.items():
        row, blocks = _configuration(state, name, bands, seed, chosen)
        summary.append(row)
        per_block += blocks
        print(f"{name}: {row}", flush=True)
    per_block_frame = pd.DataFrame(per_block)
    per_block_frame.to_csv(out / "onthemap_figures_per_block.csv", index=False)
    with (out / "onthemap_figures.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    _plot(per_block_frame, out)
    real = state.real
    _markdown(
        summary,
        out,
        workers,
        sample,
        state.median,
        float(real.count[np.isin(real.destination, chosen)].sum() / sample),
    )
    print(f"wrote {out}/onthemap_figures.md, .csv, _per_block.csv and figure_1..4 PNGs")
    return 0


@dataclass(frozen=True)
class _State:
    """The generated commutes on their grid: the real O/D pairs, each pair's ring (as the release
    has it) and the median commute."""

    grid: BlockGrid
    latitude: np.ndarray
    longitude: np.ndarray
    real: Commutes
    ring: np.ndarray
    median: float


def _state(data) -> _State:
    blocks = pd.Index(data.crosswalk.tabblk2010)
    lat = data.crosswalk.blklatdd.to_numpy(float)
    lon = data.crosswalk.blklondd.to_numpy(float)
    grid = BlockGrid.build(lat, lon)
    destination = blocks.get_indexer(data.od.w_geocode)
    origin = blocks.get_indexer(data.od.h_geocode)
    real = Commutes(
        destination, origin, data.od.S000.to_numpy(), commute_miles(origin, destination, lat, lon)
    )
    order = np.argsort(real.miles)
    median = float(real.miles[order][np.searchsorted(np.cumsum(real.count[order]), real.count.sum() / 2)])
    ring = grid.ring(grid.cell_of_block[destination], grid.cell_of_block[origin])
    return _State(grid, lat, lon, real, ring, median)


def _configuration(
    state: _State, name: str, bands: DistanceBands, seed: int, chosen: np.ndarray
) -> tuple[dict, list[dict]]:
    """One configuration's release: its summary row and its per-destination rows."""
    real = state.real
    destination, origin, count = real.destination, real.origin, real.count
    started = time.perf_counter()
    inside = state.ring < bands.ring_edges(1.0)[-1]
    rows = inside if name in DROPPED else np.ones(len(destination), dtype=bool)
    rng = np.random.default_rng(seed)
    result = release(destination[rows], origin[rows], count[rows], state.grid, EPSILON, DELTA, bands, rng=rng)
    seconds = time.perf_counter() - started
    synthetic = Commutes(
        result.destination,
        result.origin,
        result.count,
        commute_miles(result.origin, result.destination, state.latitude, state.longitude),
    )
    beyond_prior = result.stats.mean_prior_mass - float(
        (result.alpha * np.asarray(result.kept_domain, dtype=float)).mean()
    )
    added = result.alpha * np.asarray(result.kept_domain, dtype=float) + beyond_prior  # |alpha(d)|
    in_sample = np.isin(result.destinations, chosen)
    row = {
        "configuration": name,
        "max_miles": bands.edges_miles[-1],
        "min_keep": min(bands.keep),
        # the dropped variants run on a confidential inside count: no statement covers them
        "eps_prime": NOT_PRIVATE if name in DROPPED else epsilon_text(result.privacy.epsilon),
        "statement": NOT_PRIVATE if name in DROPPED else result.privacy.line(),
        "min_alpha": float(result.alpha.min()),
        "mean_added_all": float(added.mean()),
        "mean_added_sample": float(added[in_sample].mean()),
        "median_added_all": float(np.median(added)),
        "release_seconds": round(seconds, 1),
        "written_share": float(result.count.sum() / count.sum()),
        "real_inside_share": float(count[inside].sum() / count.sum()),
    }
    per_block = []
    for label, limit in (("all", None), ("short", state.median)):
        figures, blocks = _commute_accuracy(real, synthetic, chosen, limit)
        row |= {f"{label}_{key}": value for key, value in figures.items()}
        per_block += [{"configuration": name, "commutes": label, **block} for block in blocks]
    return row, per_block


def _commute_accuracy(
    real: Commutes, synthetic: Commutes, chosen: np.ndarray, limit: float | None
) -> tuple[dict[str, float], list[dict]]:
    """Average commute per sampled destination (commutes up to ``limit`` miles), synthetic against
    real: bias, mean absolute error and correlation, and one row per destination."""
    truth = _per_destination(real, chosen, limit)
    fake = _per_destination(synthetic, chosen, limit)
    both = truth.average_miles.notna() & fake.average_miles.notna()
    error = fake.average_miles[both] - truth.average_miles[both]
    figures = {
        "bias_miles": float(error.mean()),
        "mae_miles": float(error.abs().mean()),
        "correlation": float(np.corrcoef(truth.average_miles[both], fake.average_miles[both])[0, 1]),
    }
    blocks = [
        {
            "destination": int(d),
            "workers": float(truth.workers.get(d, np.nan)),
            "true_average_miles": float(truth.average_miles.get(d, np.nan)),
            "synthetic_average_miles": float(fake.average_miles.get(d, np.nan)),
        }
        for d in chosen
    ]
    return figures, blocks


#: Figure number -> (configuration, commutes) of ICDE 2008 Figures 1-4.
FIGURES = {
    1: ("200mi", "all"),
    2: ("200mi", "short"),
    3: ("100mi", "all"),
    4: ("100mi", "short"),
}


def figure_of(frame: pd.DataFrame, number: int) -> plt.Figure:
    """Figure ``number`` (1-4) from the per-block table (``onthemap_figures_per_block.csv``); its
    layout is constrained, so every label and the two-line title stay inside the image."""
    configuration, commutes = FIGURES[number]
    part = frame[(frame.configuration == configuration) & (frame.commutes == commutes)].dropna()
    figure, axes = plt.subplots(figsize=(6, 4), layout="constrained")
    axes.scatter(part.workers, part.true_average_miles, s=12, label="real (simulated data)", marker="o")
    axes.scatter(part.workers, part.synthetic_average_miles, s=12, label="synthetic", marker="x")
    axes.set_xscale("log")
    axes.set_xlabel("workers in the destination block")
    axes.set_ylabel("average commute (miles)")
    what = "all commutes" if commutes == "all" else "commutes shorter than the median"
    axes.set_title(f"Figure {number}: {what},\norigins within {configuration[:-2]} miles", fontsize=11)
    axes.legend()
    return figure


def _plot(frame: pd.DataFrame, out: Path) -> None:
    for number in FIGURES:
        figure = figure_of(frame, number)
        figure.savefig(out / f"figure_{number}.png", dpi=120)
        plt.close(figure)


def replot(out: Path) -> int:
    """Draw Figures 1-4 again from the per-block table a run wrote into ``out`` (seconds, not the
    run's minutes)."""
    table = out / "onthemap_figures_per_block.csv"
    _plot(pd.read_csv(table), out)
    print(f"drew {out}/figure_1..4.png from {table}")
    return 0


def _markdown(
    summary: list[dict], out: Path, workers: int, sample: int, median: float, mean_workers: float
) -> None:
    lines = [
        "# OnTheMap: ICDE 2008 Figures 1-4 and the prior mass",
        "",
        EVALUATION_NOTICE,
        "",
        f"{workers:,} simulated workers, {sample} destination blocks chosen at random (mean "
        f"{mean_workers:.1f} workers each; the paper's 120 averaged 15), eps = {EPSILON}, delta = {DELTA}. "
        f"Median commute {median:.2f} miles (the paper's CTPP median: 6.23). Figures: figure_1..4.png.",
        "",
    ]
    cells = []
    for row in summary:
        paper = PAPER.get(row["configuration"], {})
        paper_alpha, paper_added = paper.get("min_alpha"), paper.get("added")
        min_alpha = f"{row['min_alpha']:.5f}" + (f" ({paper_alpha})" if paper_alpha else "")
        added = f"{row['mean_added_all']:.0f}" + (f" ({paper_added:.0f})" if paper_added else "")
        cells.append(
            [
                row["configuration"],
                row["eps_prime"],
                min_alpha,
                added,
                f"{row['all_bias_miles']:+.2f} / {row['short_bias_miles']:+.2f}",
                f"{row['all_mae_miles']:.2f} / {row['short_mae_miles']:.2f}",
                f"{row['all_correlation']:.3f} / {row['short_correlation']:.3f}",
                f"{100 * row['written_share']:.2f}% ({100 * row['real_inside_share']:.2f}%)",
            ]
        )
    header = ["configuration", "eps'", "min alpha (paper)", "mean added per destination (paper)"]
    header += ["bias all / short (mi)", "MAE all / short (mi)", "correlation all / short"]
    header += ["written share (real inside)"]
    lines.append(markdown.table(header, cells))
    lines += [
        "",
        "Added per destination = alpha(d) x blocks in its kept domain + the beyond cell's N(d) / gamma "
        "(mean over all destinations). The priors here are chosen for the shrunk domain, so "
        "delta holds for what is sampled; the paper's priors were chosen for the full domain. "
        "`200mi-dropped` and `100mi-dropped` remove the pairs beyond the last band before the release "
        "(not private: the count inside is confidential); beside "
        "`200mi` and `100mi` they are the utility cost of the beyond cell. Written share: synthetic "
        "workers written over all real workers (real inside: the real workers within the last band).",
    ]
    lines += ["", "Statements (what each release as run may claim):", ""]
    lines += [f"* `{row['configuration']}`: {row['statement']}" for row in summary]
    (out / "onthemap_figures.md").write_text("\n".join(lines) + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers", type=int, default=1_500_000, help="workers (jobs) in the generated commute data"
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--sample", type=int, default=120, help="destination blocks in the figures")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/onthemap_figures"),
        help="directory for the figures and tables",
    )
    parser.add_argument(
        "--replot",
        action="store_true",
        help="only draw the figures again from the per-block table already in --out",
    )


def run(args: argparse.Namespace) -> int:
    if args.replot:
        return replot(args.out)
    return run_figures(args.workers, args.seed, args.sample, args.out)
