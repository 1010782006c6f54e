"""Accuracy of the encrypted k-NN families beside float k-NN, on the four bundled data sets, over
several stratified splits.

The encrypted class equals the clear reference of the same integer algorithm on every query (the
tests and ``knn-bench`` check this), so the clear references' accuracy on the whole held-out split
is the encrypted classifier's accuracy. For each split (``Dataset.split(seed=s)``, 80/20):

- float k-NN: scikit-learn's ``KNeighborsClassifier(k)`` on the **whole training split**, min-max
  scaled (the scale the quantizer uses) - the target (within one point);
- ``thermo`` with the data owner's settings (``server.knn.datasets.owner_settings``);
- ``fast`` and ``paper`` at ``--n`` (40) selected points.

Every model quantizes with the data set's public bounds, as ``petlab-server`` does. The CSV holds
one row per (data set, family, split); the Markdown table the means over the splits.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import MinMaxScaler

from petlab.crypto.knn.families import classify_clear
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.experiments import markdown
from petlab.progress import bar
from petlab.server.knn.datasets import BUNDLED, bundled_public_bounds, load_bundled, owner_settings

COLUMNS = ["dataset", "d", "classes", "split", "test_rows", "family", "n", "bits", "accuracy", "float_knn"]


def float_knn_accuracy(name: str, seed: int, k: int) -> float:
    """Float k-NN (scikit-learn, min-max scaled, the whole training split) on split ``seed``."""
    train, test = load_bundled(name).split(seed=seed)
    scaler = MinMaxScaler().fit(train.features)
    float_knn = KNeighborsClassifier(k).fit(scaler.transform(train.features), train.labels)
    return float(float_knn.score(scaler.transform(test.features), test.labels))


def settings_accuracy(name: str, settings: KnnSettings, splits: int) -> tuple[float, float]:
    """Mean accuracy over splits 0..splits-1 of the clear reference built with ``settings`` from
    each training split only (the encrypted class equals it), and float k-NN's mean beside it."""
    ours, floats = [], []
    for seed in range(splits):
        train, test = load_bundled(name).split(seed=seed)
        model = build_model(
            name, train.features, train.labels, settings, public_bounds=bundled_public_bounds(name)
        )
        predicted = classify_clear(model.plan, model.quantizer.transform(test.features))
        ours.append(float(np.mean(predicted == test.labels)))
        floats.append(float_knn_accuracy(name, seed, settings.k))
    return float(np.mean(ours)), float(np.mean(floats))


def split_rows(name: str, seed: int, n: int, k: int, families: tuple[str, ...]) -> list[dict]:
    data = load_bundled(name)
    train, test = data.split(seed=seed)
    scaler = MinMaxScaler().fit(train.features)
    float_knn = KNeighborsClassifier(k).fit(scaler.transform(train.features), train.labels)
    float_accuracy = float(float_knn.score(scaler.transform(test.features), test.labels))
    rows = []
    for family in families:
        settings = (
            replace(owner_settings(name), k=k)
            if family == "thermo"
            else KnnSettings(n=n, k=k, algorithm=family)
        )
        model = build_model(
            name, train.features, train.labels, settings, public_bounds=bundled_public_bounds(name)
        )
        predicted = classify_clear(model.plan, model.quantizer.transform(test.features))
        rows.append(
            {
                "dataset": name,
                "d": model.d,
                "classes": model.plan.n_classes,
                "split": seed,
                "test_rows": len(test.labels),
                "family": family,
                "n": model.plan.n,
                "bits": model.plan.bits,
                "accuracy": round(float(np.mean(predicted == test.labels)), 4),
                "float_knn": round(float_accuracy, 4),
            }
        )
    return rows


def summary(rows: list[dict]) -> str:
    """Means over the splits: one line per data set, the families side by side."""
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    families = list(dict.fromkeys(r["family"] for r in rows))
    head = ["data set (d, test rows)", "splits", "float k-NN, whole training set"]
    head += [f"{f} (n)" for f in families] + ["thermo - float, points"]
    table = []
    for name in names:
        mine = [r for r in rows if r["dataset"] == name]
        float_mean = np.mean([r["float_knn"] for r in mine if r["family"] == families[0]])
        cells = [
            f"{name} ({mine[0]['d']}, {mine[0]['test_rows']})",
            str(len({r["split"] for r in mine})),
            f"{float_mean:.3f}",
        ]
        for family in families:
            these = [r for r in mine if r["family"] == family]
            cells.append(f"{np.mean([r['accuracy'] for r in these]):.3f} ({these[0]['n']})")
        thermo = [r["accuracy"] for r in mine if r["family"] == "thermo"]
        cells.append(f"{100 * (np.mean(thermo) - float_mean):+.1f}" if thermo else "")
        table.append(cells)
    return markdown.table(head, table) + "\n"


def run_accuracy(n: int, k: int, splits: int, families: tuple[str, ...], out: Path, names=None) -> int:
    names = list(names or BUNDLED)
    rows = []
    for name in bar(names, desc="data sets"):
        for seed in bar(range(splits), desc=name, leave=False):
            rows += split_rows(name, seed, n, k, families)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    table = summary(rows)
    out.with_suffix(".md").write_text(table)
    print(table)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=40, help="points the fast and paper families keep")
    parser.add_argument("--k", type=int, default=3, help="neighbours")
    parser.add_argument("--splits", type=int, default=5, help="stratified 80/20 splits (seeds 0..)")
    parser.add_argument(
        "--families",
        nargs="+",
        default=["thermo", "fast", "paper"],
        help="encrypted k-NN circuit families to compare",
    )
    parser.add_argument(
        "--datasets", nargs="+", choices=list(BUNDLED), default=list(BUNDLED), help="data sets to run on"
    )
    parser.add_argument("--out", type=Path, default=Path("results/knn_accuracy.csv"), help="the CSV to write")


def run(args: argparse.Namespace) -> int:
    return run_accuracy(args.n, args.k, args.splits, tuple(args.families), args.out, args.datasets)
