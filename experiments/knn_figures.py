"""``petlab-experiments knn-figures``: the encrypted k-NN plots of the benchmarks page, drawn from
the committed tables in ``results/`` (no encryption, a few seconds).

- ``knn_pbs.png``: bootstrappings (PBS) per query against the training points kept, per circuit
  family and data set, from ``knn_bench.csv`` (``knn-bench --compile-only``: deterministic, no
  timing);
- ``knn_latency_pbs.png``: the server's median time per query against its PBS, every measured
  configuration of the quiet runs (``results/*quiet*.csv``, written by ``knn-bench``), with the
  line of the median seconds per PBS through them: latency follows the PBS count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

FAMILIES = {"thermo": ("C0", "o"), "fast": ("C1", "s"), "paper": ("C2", "^")}
DATASETS = {"iris": "-", "wine": "--", "breast_cancer": "-.", "digits": ":"}


def pbs_figure(bench: pd.DataFrame) -> plt.Figure:
    """PBS per query against n kept, one line per (family, data set), log-log."""
    figure, axis = plt.subplots(figsize=(7, 4.2), layout="constrained")
    for (family, dataset), rows in bench.groupby(["algorithm", "dataset"], sort=False):
        rows = rows.drop_duplicates("n_kept").sort_values("n_kept")
        colour, marker = FAMILIES.get(family, ("0.3", "x"))
        axis.plot(
            rows.n_kept,
            rows.pbs_count,
            marker=marker,
            linestyle=DATASETS.get(dataset, "-"),
            color=colour,
            label=f"{family}, {dataset}",
        )
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("training points kept (n)")
    axis.set_ylabel("PBS per query")
    axis.set_title("Bootstrappings per query against n (knn_bench.csv)")
    axis.legend(fontsize=7, ncols=2, loc="lower right")  # the corner no line reaches
    return figure


def quiet_latencies(results: Path) -> pd.DataFrame:
    """Every row of ``results/*quiet*.csv`` with a PBS count and a measured median, one per
    (family, data set, PBS count): the first file's, in name order."""
    frames = []
    for path in sorted(results.glob("*quiet*.csv")):
        frame = pd.read_csv(path)
        if {"algorithm", "dataset", "pbs_count", "server_median_s"} <= set(frame.columns):
            frame = frame[frame.server_median_s.notna()]
            frames.append(frame[["algorithm", "dataset", "pbs_count", "server_median_s"]])
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return rows.drop_duplicates(["algorithm", "dataset", "pbs_count"]).reset_index(drop=True)


def latency_figure(rows: pd.DataFrame, machine: str) -> plt.Figure:
    """Server median seconds per query against PBS, log-log, with the median s/PBS line."""
    figure, axis = plt.subplots(figsize=(7, 4.2), layout="constrained")
    for family, part in rows.groupby("algorithm", sort=False):
        colour, marker = FAMILIES.get(family, ("0.3", "x"))
        axis.scatter(part.pbs_count, part.server_median_s, color=colour, marker=marker, label=family)
        for row in part.itertuples():
            axis.annotate(
                row.dataset,
                (row.pbs_count, row.server_median_s),
                textcoords="offset points",
                xytext=(5, -10),
                fontsize=7,
            )
    per_pbs = float(np.median(rows.server_median_s / rows.pbs_count))
    span = np.array([rows.pbs_count.min() * 0.7, rows.pbs_count.max() * 1.4])
    axis.plot(span, span * per_pbs, ":", color="0.4", label=f"{per_pbs * 1000:.1f} ms per PBS (median)")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("PBS per query")
    axis.set_ylabel("server's median time per query (s)")
    axis.set_title("Server time per query against bootstrappings (quiet runs)")
    axis.legend(fontsize=8, loc="upper left")
    figure.text(0.01, 0.005, machine, fontsize=6, color="0.35")
    return figure


def draw(results: Path, out: Path) -> list[Path]:
    """Both figures from the tables in ``results``, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    bench = pd.read_csv(results / "knn_bench.csv")
    written = []
    figure = pbs_figure(bench)
    written.append(out / "knn_pbs.png")
    figure.savefig(written[-1], dpi=110)
    plt.close(figure)
    rows = quiet_latencies(results)
    if len(rows):
        first = bench.iloc[0]
        machine = f"{first.cores} cores, {first.cpu}, concrete-python {first.concrete_python}"
        figure = latency_figure(rows, machine)
        written.append(out / "knn_latency_pbs.png")
        figure.savefig(written[-1], dpi=110)
        plt.close(figure)
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=Path("results"), help="directory of the tables")
    parser.add_argument("--out", type=Path, default=Path("results"), help="directory for the PNG figures")


def run(args: argparse.Namespace) -> int:
    for path in draw(args.results, args.out):
        print(f"wrote {path}")
    return 0
