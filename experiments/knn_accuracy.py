"""Accuracy of the two encrypted k-NN algorithms beside float k-NN, on the four bundled data sets.

The encrypted class equals the clear reference of the same integer algorithm on every query (the
tests and ``knn-bench`` check this), so the clear references' accuracy on the whole held-out split
is the encrypted classifier's accuracy. Float k-NN is scikit-learn's ``KNeighborsClassifier`` on
the *same n points* each algorithm kept, on min-max scaled features (the scale the quantizer uses)
and, for reference, on raw features. The issue's rule: fast within 2 points of float k-NN.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import MinMaxScaler

from petlab.crypto.knn.families import classify_clear
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.server.knn.datasets import BUNDLED, load_bundled

COLUMNS = [
    "dataset",
    "d",
    "classes",
    "test_rows",
    "n",
    "k",
    "algorithm",
    "accuracy",
    "float_knn_scaled",
    "float_knn_raw",
    "gap_to_float_points",
]


def accuracy_rows(name: str, n: int, k: int) -> list[dict]:
    data = load_bundled(name)
    train, test = data.split()
    scaler = MinMaxScaler().fit(train.features)
    rows = []
    for algorithm in ("fast", "paper"):
        model = build_model(name, train.features, train.labels, KnnSettings(n=n, k=k, algorithm=algorithm))
        kept = model.selection.indices
        encrypted = classify_clear(model.plan, model.quantizer.transform(test.features))
        scaled = KNeighborsClassifier(k).fit(scaler.transform(train.features[kept]), train.labels[kept])
        raw = KNeighborsClassifier(k).fit(train.features[kept], train.labels[kept])
        accuracy = float(np.mean(encrypted == test.labels))
        float_scaled = float(scaled.score(scaler.transform(test.features), test.labels))
        rows.append(
            {
                "dataset": name,
                "d": model.d,
                "classes": model.plan.n_classes,
                "test_rows": len(test.labels),
                "n": n,
                "k": k,
                "algorithm": algorithm,
                "accuracy": round(accuracy, 4),
                "float_knn_scaled": round(float_scaled, 4),
                "float_knn_raw": round(float(raw.score(test.features, test.labels)), 4),
                "gap_to_float_points": round(100 * (float_scaled - accuracy), 1),
            }
        )
    return rows


def run_accuracy(n: int, k: int, out: Path) -> int:
    rows = [row for name in BUNDLED for row in accuracy_rows(name, n, k)]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    header = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join("| " + " | ".join(str(r[c]) for c in COLUMNS) + " |\n" for r in rows)
    out.with_suffix(".md").write_text(header + body)
    print(header + body)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/knn_accuracy.csv"))


def run(args: argparse.Namespace) -> int:
    return run_accuracy(args.n, args.k, args.out)
