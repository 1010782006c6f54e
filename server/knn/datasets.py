"""Labelled training data for the data owner: scikit-learn's bundled sets or a CSV file, and the
public per-feature bounds its quantizer is published with.

The split follows Ameur et al. (PSD 2022, Section 4.1): 20 % of the records held out for testing,
the rest for training (stratified, seeded).

Public bounds. Every client needs the quantizer's per-feature range, so it is published in
``ModelInfo``. Fitted on the training set it would publish the exact minimum and maximum of every
feature, each often a single record's value (on Iris, three of the four maxima belong to one
record). So a server takes the ranges from a public source only: a bounds file for a CSV data set
(:func:`load_bounds_file`: ``feature,low,high`` per line, from domain knowledge, a data dictionary
or a previous public release), and for scikit-learn's bundled sets their published documentation
(:func:`bundled_public_bounds`: the summary statistics printed in each data set's description,
which are the minima and maxima of the whole published data set; the digits' pixel range 0-16).
Queries outside the bounds are clipped (``crypto.knn.quantization``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn import datasets as sk_datasets
from sklearn.model_selection import train_test_split

from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.knn.thermo.plan import DistanceChoice

BUNDLED = {
    "iris": sk_datasets.load_iris,
    "wine": sk_datasets.load_wine,
    "breast_cancer": sk_datasets.load_breast_cancer,
    "digits": sk_datasets.load_digits,
}


@dataclass(frozen=True)
class Dataset:
    name: str
    features: np.ndarray  # (rows, d) float
    labels: np.ndarray  # (rows,) class indices 0..C-1
    class_names: tuple[str, ...]
    feature_names: tuple[str, ...]

    def split(self, test_fraction: float = 0.2, seed: int = 0) -> tuple[Dataset, Dataset]:
        """Stratified train/test split."""
        train_idx, test_idx = train_test_split(
            np.arange(len(self.labels)),
            test_size=test_fraction,
            random_state=seed,
            stratify=self.labels,
        )
        return self.subset(np.sort(train_idx)), self.subset(np.sort(test_idx))

    def subset(self, rows: np.ndarray) -> Dataset:
        return Dataset(
            self.name, self.features[rows], self.labels[rows], self.class_names, self.feature_names
        )


def load_bundled(name: str) -> Dataset:
    """One of scikit-learn's offline data sets: iris, wine, breast_cancer, digits."""
    if name not in BUNDLED:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(sorted(BUNDLED))}")
    bunch = BUNDLED[name]()
    feature_names = getattr(bunch, "feature_names", None)
    if feature_names is None or len(feature_names) != bunch.data.shape[1]:
        feature_names = [f"x{i}" for i in range(bunch.data.shape[1])]
    return Dataset(
        name=name,
        features=np.asarray(bunch.data, dtype=np.float64),
        labels=np.asarray(bunch.target, dtype=np.int64),
        class_names=tuple(str(c) for c in bunch.target_names),
        feature_names=tuple(str(f) for f in feature_names),
    )


def load_csv(path: Path, label_column: str = "label", name: str | None = None) -> Dataset:
    """A CSV with numeric feature columns and one label column (any values; sorted to classes)."""
    frame = pd.read_csv(path)
    if label_column not in frame.columns:
        raise ValueError(f"{path}: no label column {label_column!r} (columns: {list(frame.columns)})")
    labels_raw = frame.pop(label_column)
    non_numeric = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if non_numeric:
        raise ValueError(f"{path}: feature columns must be numeric, these are not: {non_numeric}")
    if frame.shape[1] == 0 or frame.isna().any().any() or labels_raw.isna().any():
        raise ValueError(f"{path}: needs at least one feature column and no missing values")
    classes, labels = np.unique(labels_raw.astype(str).to_numpy(), return_inverse=True)
    return Dataset(
        name=name or Path(path).stem,
        features=frame.to_numpy(dtype=np.float64),
        labels=labels.astype(np.int64),
        class_names=tuple(classes),
        feature_names=tuple(str(c) for c in frame.columns),
    )


# the measured error budget of every bundled data set (owner_settings)
OWNER_BUDGET = 0.1


def owner_settings(name: str) -> KnnSettings:
    """The data owner's settings for a bundled data set: the thermo family, k = 3, and
    what keeps its classifier within one point of float k-NN on the whole training set over ten
    stratified splits (docs/explanation/knn-circuits.md, "Accuracy and the owner settings";
    ``petlab-experiments knn-accuracy``). Iris keeps 40
    selected points (they classify the held-out rows as well as all 120: the classes barely
    overlap); the others keep their whole training set, which k-NN needs (breast_cancer lost two
    points at n = 200, digits needs every variant of every digit). Wine uses 3-bit features
    (quantized exact k-NN at 4 bits is already 1.7 points below float on five splits); the distance
    choices are public parameters of the family (``DistanceChoice``), not derived from any record.
    Wine keeps the smallest n that cross-validation on its own training rows finds as accurate as
    the whole set (``KnnSettings.condense``, ``crypto.knn.condensation``; 27 to 92 of 142 points
    over ten splits, docs/explanation/knn-speed.md); condensing breast_cancer or digits lost two to
    three points, so they keep every point.

    Each data set's error budget and rounding (``KnnSettings.global_p_error``,
    ``KnnSettings.rounding``) are the cheapest variant, by concrete's complexity, among the budgets
    1e-4, 1e-2 and 0.1 with exact truncation and 0.1 with approximate rounding, whose circuit,
    simulated with concrete's lookup and rounding errors on every test row of the splits, answered
    within one point of float k-NN and agreed with the exact clear reference on at least 99.5 % of
    the answers with 95 % confidence (the Clopper-Pearson lower bound;
    ``petlab-experiments knn-budget``, ``results/knn_budget.md``, docs/explanation/knn-speed.md "The
    error budget"): 0.1 with exact truncation on all four. Approximate rounding agreed on 99.54 %
    on wine (lower bound 99.22 %), 98.89 % on breast_cancer and 99.48 % on digits; Iris has nothing
    to round. ``--rounding approximate`` remains the owner's choice."""
    if name not in BUNDLED:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(sorted(BUNDLED))}")
    return {
        "iris": KnnSettings(n=40, bits=4, algorithm="thermo", global_p_error=OWNER_BUDGET),
        "wine": KnnSettings(
            n=None,
            bits=3,
            algorithm="thermo",
            distance=DistanceChoice(2, 4, 5),
            condense=0.0,
            global_p_error=OWNER_BUDGET,
        ),
        "breast_cancer": KnnSettings(
            n=None, bits=4, algorithm="thermo", distance=DistanceChoice(1, 3, 5), global_p_error=OWNER_BUDGET
        ),
        "digits": KnnSettings(
            n=None, bits=4, algorithm="thermo", distance=DistanceChoice(16, 6, 6), global_p_error=OWNER_BUDGET
        ),
    }[name]


def bundled_public_bounds(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Published per-feature ranges of a bundled data set (module docstring): the whole published
    data set's minima and maxima (its documented summary statistics), never a training split's;
    for digits the documented pixel range [0, 16]."""
    full = load_bundled(name)
    if name == "digits":
        d = full.features.shape[1]
        return np.zeros(d), np.full(d, 16.0)
    return full.features.min(axis=0), full.features.max(axis=0)


def load_bounds_file(path: Path, feature_names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Public per-feature bounds from a CSV with columns ``feature,low,high``, one row per feature
    of the data set (any order); every feature must be covered, with finite ``low < high``."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the bounds file {path}: {exc}") from None
    if list(frame.columns) != ["feature", "low", "high"]:
        raise ValueError(f"{path}: the columns must be feature,low,high")
    table = {str(row.feature): (row.low, row.high) for row in frame.itertuples(index=False)}
    missing = [f for f in feature_names if f not in table]
    if missing or len(table) != len(frame):
        raise ValueError(f"{path}: need exactly one row per feature; missing: {missing}")
    lows = np.array([float(table[f][0]) for f in feature_names])
    highs = np.array([float(table[f][1]) for f in feature_names])
    if not (np.all(np.isfinite(lows)) and np.all(np.isfinite(highs)) and np.all(lows < highs)):
        raise ValueError(f"{path}: bounds must be finite with low < high for every feature")
    return lows, highs
