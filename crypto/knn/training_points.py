"""Choosing the n training points the encrypted classifier compares against.

HE-kNN-V costs O(n²) bootstraps (Ameur et al., PSD 2022, Table 4), so the data owner keeps only n
representative points. The paper's procedure (Section 4.1, "Simulation Procedure") draws n points at
random, measures the classification rate, repeats R times and keeps the best subset.

This module does that and then improves on it, deterministically for a given seed:

1. *Best of R random subsets* (the paper's method, R = ``random_rounds``).
2. *Class prototypes*: per class, k-means on the class's points (allocation proportional to class
   size, at least one per class), each centroid replaced by its nearest real training point.
3. Starting from the better of 1 and 2, *swap hill climbing*: ``swap_rounds`` seeded proposals that
   replace one chosen point with an unchosen one, kept when the score does not drop.

The score of a subset is the accuracy of the same quantized k-NN the circuit computes (by default
the paper's, ties broken as in ``crypto.knn.paper.plan``; ``classifier`` gives another, e.g. the fast
rule of ``crypto.knn.fast.reference``) over the whole quantized training set. Since step 3 starts
from step 1's subset and never lowers the score, the result scores at least as well as the paper's best-of-R.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans

from petlab.crypto.knn.paper.reference import classify_by_sorting


@dataclass(frozen=True)
class Selection:
    indices: np.ndarray  # sorted positions in the training set
    score: float  # training-set accuracy of the subset
    random_baseline_score: float  # best of R random subsets (the paper's method)


# (train levels, train labels, k, n_classes, queries) -> predicted classes
Classifier = Callable[[np.ndarray, np.ndarray, int, int, np.ndarray], np.ndarray]


def subset_score(
    levels: np.ndarray,
    labels: np.ndarray,
    subset: np.ndarray,
    k: int,
    n_classes: int,
    classifier: Classifier = classify_by_sorting,
) -> float:
    predicted = classifier(levels[subset], labels[subset], k, n_classes, levels)
    return float(np.mean(predicted == labels))


def best_random_subset(
    levels: np.ndarray,
    labels: np.ndarray,
    n: int,
    k: int,
    n_classes: int,
    rng: np.random.Generator,
    rounds: int,
    classifier: Classifier = classify_by_sorting,
) -> tuple[np.ndarray, float]:
    """The paper's method: the best of ``rounds`` uniformly random n-subsets."""
    if rounds < 1:
        raise ValueError("best_random_subset needs at least one round")
    best, best_score = np.empty(0, dtype=int), -1.0
    for _ in range(rounds):
        subset = np.sort(rng.choice(len(levels), size=n, replace=False))
        score = subset_score(levels, labels, subset, k, n_classes, classifier)
        if score > best_score:
            best, best_score = subset, score
    return best, best_score


def class_prototypes(levels: np.ndarray, labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Medoid-like prototypes: per-class k-means centroids snapped to real points."""
    classes, counts = np.unique(labels, return_counts=True)
    quota = np.floor(counts / counts.sum() * n).astype(int)
    if n >= len(classes):
        quota = np.maximum(quota, 1)
    while quota.sum() < n:  # hand the remainder to the classes with the most points per slot
        quota[np.argmax(counts / (quota + 1))] += 1
    while quota.sum() > n:
        quota[np.argmax(quota)] -= 1
    chosen: list[int] = []
    for cls, take in zip(classes, quota, strict=True):
        members = np.flatnonzero(labels == cls)
        take = min(take, len(members))
        if take == 0:
            continue
        points = levels[members].astype(np.float64)
        centroids = KMeans(n_clusters=take, n_init=4, random_state=seed).fit(points).cluster_centers_
        available = np.ones(len(members), dtype=bool)
        for centroid in centroids:
            distances = ((points - centroid) ** 2).sum(axis=1)
            distances[~available] = np.inf
            nearest = int(np.argmin(distances))
            available[nearest] = False
            chosen.append(int(members[nearest]))
    rest = np.setdiff1d(np.arange(len(levels)), chosen)
    if len(chosen) < n:  # a class smaller than its quota: fill deterministically
        chosen += list(np.random.default_rng(seed).choice(rest, n - len(chosen), replace=False))
    return np.sort(np.asarray(chosen[:n], dtype=np.int64))


def select_training_points(
    levels: np.ndarray,
    labels: np.ndarray,
    n: int,
    k: int,
    n_classes: int,
    seed: int = 0,
    random_rounds: int = 100,
    swap_rounds: int = 400,
    classifier: Classifier = classify_by_sorting,
) -> Selection:
    """Pick n representative points (module docstring). ``n`` at least the training size keeps all."""
    levels, labels = np.asarray(levels), np.asarray(labels)
    size = len(levels)
    if n < 2:
        raise ValueError(f"n must be at least 2, got {n}")
    if not 1 <= k <= min(n, size):
        raise ValueError(f"k must be between 1 and n = {min(n, size)}, got {k}")
    if n >= size:
        everything = np.arange(size)
        score = subset_score(levels, labels, everything, k, n_classes, classifier)
        return Selection(everything, score, score)

    rng = np.random.default_rng(seed)
    random_best, random_score = best_random_subset(
        levels, labels, n, k, n_classes, rng, random_rounds, classifier
    )
    prototypes = class_prototypes(levels, labels, n, seed)
    prototype_score = subset_score(levels, labels, prototypes, k, n_classes, classifier)
    current, current_score = (
        (prototypes, prototype_score) if prototype_score > random_score else (random_best, random_score)
    )
    for _ in range(swap_rounds):
        outside = np.setdiff1d(np.arange(size), current, assume_unique=True)
        candidate = current.copy()
        candidate[rng.integers(n)] = outside[rng.integers(len(outside))]
        candidate.sort()
        score = subset_score(levels, labels, candidate, k, n_classes, classifier)
        if score >= current_score:
            current, current_score = candidate, score
    return Selection(current, current_score, random_score)
