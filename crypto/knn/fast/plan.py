"""The integer plan of the fast exact k-NN: clear constants and the public distance scale.

The paper's circuit (Ameur et al., PSD 2022, Section 3.2-3.3, ``crypto.knn.paper.plan``) compares all
n(n-1)/2 pairs of ~10-bit squared-distance differences. Its cost is the number of programmable
bootstraps (PBS) times their bit width, and on this machine a lookup costs 8.5-16 ms up to 5 bits
but 69 ms at 6 bits and 582 ms at 8 bits. The fast family therefore keeps every lookup input at
``distance_bits + 1`` <= 5 bits and makes O(n) of them. The integer algorithm (the encrypted class
equals ``crypto.knn.fast.reference`` on every query):

1. Per-feature coarse distance (public, data-independent table, no training data in it):
   ``g(q, v) = min(floor((q - v)^2 / scale), cap)`` for the query level q and a training level v.
   ``scale`` and ``cap`` depend only on (d, bits, distance_bits) (:func:`choose_scale`).
   Training values are clear, so one lookup per (feature, *distinct* training value) serves every
   training point with that value; ``raw_i = sum_f g(q_f, x_if)`` is a clear 0/1 matrix product.
2. If ``d * cap`` exceeds ``distance_max = 2^distance_bits - 1`` (high-d data), a second coarsening
   lookup per point maps raw_i to ``floor(raw_i * (distance_max + 1) / (d * cap + 1))``, which is
   monotone, so the ordering is kept up to merged levels. Its input has ``bit_length(d * cap)`` bits.
   ``distance_bits`` is public too (:func:`default_distance_bits`: 3 for d <= 7, else 4).
3. ``D_k``, the k-th smallest distance (with multiplicity), by an oblivious selection network:
   pad the n distances with ``distance_max`` to a multiple of k (exact: a padded value never
   lowers the k-th smallest, since every true distance is <= distance_max), sort groups of k
   (odd-even transposition, k(k-1)/2 comparators per group), then merge groups pairwise keeping
   the k smallest: ``c_i = min(a_i, b_{k-1-i})`` (k comparators; the result is up-down) and a
   sort of c (``selection_network.unimodal_layers``), except at the last merge, where
   ``D_k = max_i c_i`` (k - 1 comparators). One compare-exchange is ONE lookup:
   ``min(a, b) = b + m(a - b)`` with ``m(t) = min(t, 0)``, and ``max = a - m(a - b)`` is free.
   Every layer is one tensor lookup (both cores).
4. Tie rule for distances: ``ind_i = [d_i <= D_k]`` (n lookups), i.e. every training point at the
   k-th distance votes, as R's ``class::knn`` with ``use.all = TRUE``; the vote may thus count
   more than k points. ``votes_c = sum_{i: label_i = c} ind_i`` is a clear matrix product.
5. Tie rule for votes: the class with the most votes, the smallest class index among equal votes.
   For each pair c < c' the bit ``[votes_c >= votes_c']`` is the sign of the
   ``vote_bits``-bit value ``votes_c' - votes_c - 1``, read exactly with
   ``fhe.truncate_bit_pattern`` (one small PBS per removed bit) and one ``sign_bits`` lookup; then
   ``win_c = [wins_c == C - 1]`` (C small lookups) and ``class = sum_c c * win_c`` (linear).

Cost model (lookups per query, with G = ceil(n / k) groups and S(k) comparators of the up-down
sort, ``selection_network.unimodal_layers``: 2 for k = 3):
  L = sum_f #distinct(x_f) <= d * 2^bits lookups of ``bits``-bit inputs (step 1);
  n lookups of ``bit_length(d * cap)`` bits when d * cap > distance_max (step 2);
  about G * k(k-1)/2 + (G - 1) * (k + S(k)) lookups of distance_bits + 1 bits (step 3; exactly
  ``selection_network.comparator_count(n, k)``, 107 for n = 40, k = 3), n of the same width (step 4);
  C(C-1)/2 * (vote_bits - sign_bits + 1) + C small lookups (step 5).
Iris (d = 4, 4-bit levels, k = 3, C = 3, distance_bits 3) at n = 40: 44 + 107 + 40 + 9 = 200
lookups, all of at most 4 bits; growth in n is linear (427 network comparators at n = 160).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from petlab.crypto.knn.ranges import TrainingLevels, signed_bit_width

# Public choice of the coarse per-feature distance: g saturates near a level difference of this
# fraction of the level range (chosen by the accuracy of iris, wine and breast_cancer at n = 40).
SATURATION_FRACTION = 0.3


@dataclass(frozen=True)
class DistanceScale:
    """Public, data-independent parameters of the coarse distance (module docstring, steps 1-2)."""

    scale: int  # g = min(floor((q - v)^2 / scale), cap)
    cap: int
    raw_max: int  # d * cap, largest sum of per-feature costs
    distance_max: int  # largest distance entering the selection network

    @property
    def coarsened(self) -> bool:
        return self.raw_max > self.distance_max


def default_distance_bits(d: int) -> int:
    """3 bits (4-bit comparisons) while every feature can still add a full unit (d <= 7), else 4
    (5-bit comparisons). Public: it depends on d only. Measured on iris over six splits: 3 and
    4 bits give the same accuracy (0.961 and 0.956, float k-NN 0.956); on wine, 3 bits lose 3 points."""
    return 3 if d <= 7 else 4


def choose_scale(d: int, bits: int, distance_bits: int) -> DistanceScale:
    """The largest cap that keeps ``d * cap`` within ``2^distance_bits - 1`` (at least 1, then a
    second coarsening lookup is needed), and ``scale = round(R^2 / (cap + 1))`` with R the level
    difference ``SATURATION_FRACTION * 2^bits``: g takes its cap for |q - v| a little below R."""
    distance_max = (1 << distance_bits) - 1
    cap = max(1, min(distance_max // d, 7))
    saturation = max(1.0, SATURATION_FRACTION * (1 << bits))
    scale = max(1, round(saturation**2 / (cap + 1)))
    return DistanceScale(scale=scale, cap=cap, raw_max=d * cap, distance_max=min(distance_max, d * cap))


def feature_cost_table(bits: int, scale: DistanceScale) -> np.ndarray:
    """``g[q, v]`` for every pair of levels (2^bits x 2^bits)."""
    levels = np.arange(1 << bits)
    squared = (levels[:, None] - levels[None, :]) ** 2
    return np.minimum(squared // scale.scale, scale.cap).astype(np.int64)


def coarsen_table(scale: DistanceScale) -> np.ndarray:
    """``h[raw]``: monotone map of 0..raw_max onto 0..distance_max (step 2)."""
    raw = np.arange(scale.raw_max + 1)
    return (raw * (scale.distance_max + 1) // (scale.raw_max + 1)).astype(np.int64)


@dataclass(frozen=True)
class FastKnnPlan(TrainingLevels):
    """Clear constants of the fast circuit (module docstring gives the algorithm)."""

    train: np.ndarray  # (n, d) quantized training points
    labels: np.ndarray  # (n,)
    n_classes: int
    k: int
    bits: int
    distance_bits: int
    scale: DistanceScale
    lookup_features: np.ndarray  # (L,) feature of each per-feature lookup
    lookup_values: np.ndarray  # (L,) training level of each per-feature lookup
    lookup_matrix: np.ndarray  # (L, n) 0/1: raw = g_values @ lookup_matrix
    onehot: np.ndarray  # (n, C)

    @property
    def n_lookups(self) -> int:
        return int(self.lookup_values.shape[0])

    @property
    def compare_bits(self) -> int:
        """Signed width of a difference of two distances (every network lookup's input)."""
        return signed_bit_width(-self.scale.distance_max, self.scale.distance_max)

    @property
    def vote_bits(self) -> int:
        """Signed width of ``votes_c' - votes_c - 1`` over all class pairs."""
        counts = np.bincount(self.labels, minlength=self.n_classes)
        return signed_bit_width(-int(counts.max()) - 1, int(counts.max()) - 1)

    def selector(self) -> np.ndarray:
        """(d, L) 0/1 matrix: ``q @ selector`` repeats each query level once per lookup."""
        return (np.arange(self.d)[:, None] == self.lookup_features[None, :]).astype(np.int64)

    def cost_tables(self) -> np.ndarray:
        """(L, 2^bits): row j is the table ``g(., lookup_values[j])`` of lookup j."""
        return feature_cost_table(self.bits, self.scale)[:, self.lookup_values].T.copy()


def build_fast_plan(
    train: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    k: int,
    bits: int,
    distance_bits: int | None = None,
) -> FastKnnPlan:
    """Check the quantized training set and derive the fast circuit's clear constants
    (``distance_bits`` defaults to :func:`default_distance_bits`)."""
    from petlab.crypto.knn.paper.plan import build_plan

    if distance_bits is None:
        distance_bits = default_distance_bits(np.shape(train)[1] if np.ndim(train) == 2 else 0)
    if not 2 <= distance_bits <= 5:
        raise ValueError(f"distance_bits must be between 2 and 5, got {distance_bits}")
    checked = build_plan(train, labels, n_classes, k, bits)  # the paper plan's input validation
    train, labels = checked.train, checked.labels
    scale = choose_scale(train.shape[1], bits, distance_bits)
    features, values, matrix = distinct_value_lookups(train)
    return FastKnnPlan(
        train=train,
        labels=labels,
        n_classes=int(n_classes),
        k=int(k),
        bits=int(bits),
        distance_bits=int(distance_bits),
        scale=scale,
        lookup_features=features,
        lookup_values=values,
        lookup_matrix=matrix,
        onehot=np.eye(n_classes, dtype=np.int64)[labels],
    )


def distinct_value_lookups(train: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One lookup per (feature, distinct training level) (step 1): its feature, its level, and the
    (L, n) 0/1 matrix that adds each lookup's cost to the points holding that level."""
    features, values, columns = [], [], []
    for f in range(train.shape[1]):
        for v in np.unique(train[:, f]):
            features.append(f)
            values.append(int(v))
            columns.append((train[:, f] == v).astype(np.int64))
    return np.asarray(features, dtype=np.int64), np.asarray(values, dtype=np.int64), np.stack(columns)


def restrict(plan: FastKnnPlan, indices: np.ndarray) -> FastKnnPlan:
    """The plan's constants for a subset of its training points (a partition of a split
    evaluation, ``crypto.knn.fast.split``): the same public scale and widths, the subset's own
    lookups. Not validated again: every subset of a valid plan's points is valid data."""
    train = plan.train[indices]
    features, values, matrix = distinct_value_lookups(train)
    return replace(
        plan,
        train=train,
        labels=plan.labels[indices],
        lookup_features=features,
        lookup_values=values,
        lookup_matrix=matrix,
        onehot=plan.onehot[indices],
    )


def class_pairs(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (c, c') with c < c', in the order the circuit compares them."""
    first, second = np.triu_indices(n_classes, 1)
    return first.astype(np.int64), second.astype(np.int64)


def pair_matrices(n_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``t = votes @ diff_matrix - 1`` (one column per pair, ``votes_c' - votes_c - 1``) and
    ``wins = beats @ win_matrix + win_offsets`` where ``beats`` is ``[t < 0] = [votes_c >= votes_c']``."""
    first, second = class_pairs(n_classes)
    pairs = np.arange(first.shape[0])
    diff = np.zeros((n_classes, pairs.shape[0]), dtype=np.int64)
    diff[second, pairs] = 1
    diff[first, pairs] = -1
    win = np.zeros((pairs.shape[0], n_classes), dtype=np.int64)
    win[pairs, first] = 1
    win[pairs, second] = -1
    offsets = np.bincount(second, minlength=n_classes).astype(np.int64)  # c' wins when beats = 0
    return diff, win, offsets
