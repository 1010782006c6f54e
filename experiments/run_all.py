"""``petlab-experiments all``: every experiment, one command, CSV + Markdown + PNG in one directory.

``--quick`` (what ``make demo`` runs): the four data sets with the default (thermo) family at
n = 10 and the owner's bits and distance, 2 encrypted queries each (a smoke test: they must agree
with the clear reference), the owner's settings' accuracy on one whole held-out split (the clear
reference, which the encrypted class equals) beside float k-NN, sweeps at n <= 8, 20,000 commute
workers, the shipped 5,000-record ACS sample (plausible deniability with k = 10: the sample has
2,000 seeds). ``--full``: every family at n = 40 with 10 queries, the accuracy over 5 splits,
sweeps n = 10..60, d = 1..4, k = 1..7, 200,000 commute workers, and the 100,000-record ACS set with
k = 50 when ``$PETLAB_ACS_DATA`` or ``../shared/data/acs13.csv`` is present. Both end with
``petlab-experiments links`` of the same size (``experiments.links``: a device's wait over emulated
links).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from petlab.crypto.knn.families import ALGORITHMS
from petlab.crypto.knn.model import KnnSettings
from petlab.experiments import knn_accuracy, knn_experiments, links, report, synthesis_experiments
from petlab.experiments.machine import describe
from petlab.experiments.plausible_bench import default_data
from petlab.plaindata import acs_sample_path
from petlab.progress import bar


@dataclass(frozen=True)
class ExperimentConfig:
    datasets: tuple[str, ...] = ("iris", "wine", "breast_cancer", "digits")
    families: tuple[str, ...] = ("thermo",)  # encrypted families run over gRPC
    n: int = 10
    k: int = 3
    queries: int = 2
    accuracy_splits: int = 1  # clear references of the owner's settings on whole held-out splits
    sweep_n: tuple[int, ...] = (4, 6, 8)  # three points: a curve, each point real keys and queries
    sweep_d: tuple[int, ...] = ()
    sweep_k: tuple[int, ...] = ()
    sweep_base_n: int = 6
    sweep_queries: int = 1
    workers: int = 20_000
    epsilons: tuple[float, ...] = (2, 3, 4, 4.6, 6, 8)
    p_mins: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1)
    adaptive_epsilons: tuple[float, ...] = (0.1, 1, 10)
    adaptive_depth: int = 8
    acs: Path | None = None  # None: the shipped sample
    omegas: tuple[int, ...] = (9, 11)
    plausible_k: int = 10  # the sample's 2,000 seeds; the paper's k = 50 is for 1.3M
    distinguishing_per_class: int = 1000
    seed: int = 1
    links: links.LinksConfig | None = links.QUICK  # a device's wait over emulated links (None: skipped)


QUICK = ExperimentConfig()
FULL = ExperimentConfig(
    families=ALGORITHMS,
    n=40,
    queries=10,
    accuracy_splits=5,
    sweep_n=(10, 20, 40, 60),
    sweep_d=(1, 2, 3, 4),
    sweep_k=(1, 3, 5, 7),
    sweep_base_n=20,
    sweep_queries=3,
    workers=200_000,
    acs=default_data(),
    distinguishing_per_class=5000,
    links=links.FULL,
)


def run_all(config: ExperimentConfig, out: Path, cache: Path, mode: str = "quick") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    machine = describe()
    with bar(total=_progress_steps(config), desc="experiments", unit="step") as progress:
        results = _knn_results(config, cache, progress)
        results |= _synthesis_results(config, progress)
    link_figures: list[Path] = []
    link_notes: list[str] = []
    if config.links is not None:
        _, link_figures, link_notes = links.run_links(config.links, out, cache, machine)
    for name, frame in results.items():
        frame.to_csv(out / f"{name}.csv", index=False)
    figures = report.knn_figures(results["knn"], results["knn_sweeps"], out, machine)
    figures += report.synthesis_figures(
        results["onthemap"],
        results["onthemap_commute"],
        results["adaptive"],
        results["plausible"],
        out,
        machine,
    )
    figures += link_figures
    path = report.write_report(results, figures, out, machine, mode, link_notes)
    print(f"wrote {len(results)} CSV tables and {len(figures)} figures to {out}/")
    print()
    print("What to look at first:")
    for what, value in report.headlines(results):
        print(f"  {what}: {value}")
    print()
    print(f"The report, which opens with these and the plots: {path}")
    return path


def _progress_steps(config: ExperimentConfig) -> int:
    return (
        len(config.datasets) * knn_experiments.progress_steps(config.queries, config.families)
        + len(config.datasets)
        + len(config.sweep_n)
        + len(config.sweep_d)
        + len(config.sweep_k)
        + len(config.epsilons)
        + len(config.p_mins)
        + len(config.adaptive_epsilons)
        + len(config.omegas) * 2
        + 2
    )


def _knn_results(config: ExperimentConfig, cache: Path, progress) -> dict[str, pd.DataFrame]:
    """Encrypted k-NN over gRPC per data set, the owner's settings' accuracy, the sweeps."""
    results: dict[str, pd.DataFrame] = {}
    settings = KnnSettings(n=config.n, k=config.k)
    rows = []
    for name in config.datasets:
        progress.set_postfix_str(f"k-NN on {name}")
        rows += knn_experiments.run_dataset(
            name, settings, config.queries, cache, progress, config.families, owner=True
        )
    results["knn"] = pd.DataFrame(rows)[knn_experiments.KNN_COLUMNS]
    accuracy = []
    for name in config.datasets:
        progress.set_postfix_str(f"k-NN accuracy on {name}")
        for seed in range(config.accuracy_splits):
            accuracy += knn_accuracy.split_rows(name, seed, config.n, config.k, ("thermo",))
        progress.update()
    results["knn_accuracy"] = pd.DataFrame(accuracy, columns=knn_accuracy.COLUMNS)
    progress.set_postfix_str("k-NN sweeps")
    results["knn_sweeps"] = pd.DataFrame(
        knn_experiments.run_sweeps(
            list(config.sweep_n),
            list(config.sweep_d),
            list(config.sweep_k),
            config.sweep_queries,
            config.sweep_base_n,
            progress,
        ),
        columns=knn_experiments.SWEEP_COLUMNS,
    )
    return results


def _synthesis_results(config: ExperimentConfig, progress) -> dict[str, pd.DataFrame]:
    """OnTheMap, the adaptive histograms and plausible deniability."""
    results: dict[str, pd.DataFrame] = {}
    progress.set_postfix_str("OnTheMap")
    onthemap, commute = synthesis_experiments.onthemap_experiments(
        config.workers, config.seed, config.epsilons, config.p_mins, progress
    )
    results["onthemap"], results["onthemap_commute"] = onthemap, commute.reset_index(names="destination")
    progress.set_postfix_str("adaptive histograms")
    results["adaptive"] = synthesis_experiments.adaptive_experiments(
        config.workers, config.seed, config.adaptive_epsilons, config.adaptive_depth, progress
    )
    progress.set_postfix_str("plausible deniability")
    frame = pd.read_csv(config.acs or acs_sample_path())
    results["plausible"] = synthesis_experiments.plausible_experiments(
        frame, config.omegas, config.seed, config.distinguishing_per_class, config.plausible_k, progress
    )
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a few minutes on 2 cores (default)")
    size.add_argument("--full", action="store_true", help="the papers' scales (an hour or more)")
    parser.add_argument("--out", type=Path, help="results directory (default results/all-quick or -full)")
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(".petlab-cache"), help="compiled circuits (reused across runs)"
    )


def run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(logging.WARNING)  # the server's per-call log would drown the bar
    mode = "full" if args.full else "quick"
    run_all(FULL if args.full else QUICK, args.out or Path(f"results/all-{mode}"), args.cache_dir, mode)
    return 0
