"""The integer plan of HE-kNN-V for one clear, quantized training set.

Ameur et al., "Secure and Non-interactive k-NN Classifier Using Symmetric FHE" (PSD 2022), Section 3.
The data owner's training set is in the clear, so every matrix below is a clear constant of the
circuit; only the query ``q`` (d integers of ``bits`` bits) is encrypted.

Distance differences (Section 3.2, equation (2)). For training points i < j,

    d²(x_i, q) - d²(x_j, q) = c_ij + 2 u_ij · q,   c_ij = |x_i|² - |x_j|²,   u_ij = x_j - x_i,

which is linear in q: no bootstrapping. Point i *precedes* j when it is strictly closer, or equally
close with the smaller index (the deterministic tie rule for equal distances). Because u_ij · q is an
integer,

    c + 2 u·q <= 0  <=>  u·q <= floor(-c/2)  <=>  e_ij := u·q + ceil(c/2) - 1 < 0.

Halving the difference this way drops one bit from the value whose sign must be taken and halves the
clear weights, which halves the noise the linear step amplifies.

Delta matrix (Section 3.2, "Sorting"): m_ij = [i precedes j] = [e_ij < 0]. Antisymmetry
(m_ji = 1 - m_ij for i != j) means only the n(n-1)/2 pairs i < j are compared.

Ranks (Section 3.3, "Selecting the k-Nearest Neighbors"): the column sum
rank_j = sum_i m_ij = #{i < j : m_ij} + #{i > j : 1 - m_ji}, written as ``m @ rank_matrix +
rank_offsets`` with entries of rank_matrix in {-1, 0, +1}. The order is total, so the ranks are a
permutation of 0..n-1 and the mask ``rank < k`` has exactly k ones.

Majority vote (Section 3.3, "Majority Vote", Fig. 2): votes = mask @ onehot(labels). Only the class
index leaves the circuit: the encrypted argmax takes the maximum of the scores
``votes_c * C + (C - 1 - c)``, which are distinct, so the maximum is the class with the most votes
and, among equal votes, the smallest class index (the tie rule scikit-learn's KNeighborsClassifier
also uses); ``class = C - 1 - (max score mod C)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from petlab.crypto.knn.ranges import TrainingLevels, signed_bit_width


@dataclass(frozen=True)
class KnnPlan(TrainingLevels):
    """Clear constants of the HE-kNN-V circuit (module docstring gives the derivation)."""

    train: np.ndarray  # (n, d) quantized training points
    labels: np.ndarray  # (n,) class index of each training point
    n_classes: int
    k: int
    bits: int
    pair_weights: np.ndarray  # (d, P): e = q @ pair_weights + pair_offsets
    pair_offsets: np.ndarray  # (P,)
    rank_matrix: np.ndarray  # (P, n): rank = before @ rank_matrix + rank_offsets
    rank_offsets: np.ndarray  # (n,)
    onehot: np.ndarray  # (n, C)
    difference_bits: int  # signed bit width that holds every e_ij over the whole query box

    @property
    def n_pairs(self) -> int:
        return int(self.pair_offsets.shape[0])

    @property
    def rank_bits(self) -> int:
        """Signed bit width of the intermediate ``before @ rank_matrix`` (range -(n-1)..n-1)."""
        return signed_bit_width(-(self.n - 1), self.n - 1)

    @property
    def score_bits(self) -> int:
        """Unsigned bit width of the vote scores ``votes * C + (C - 1 - c)``."""
        return max(1, int(self.k * self.n_classes + self.n_classes - 1).bit_length())


def build_plan(train: np.ndarray, labels: np.ndarray, n_classes: int, k: int, bits: int) -> KnnPlan:
    """Check the quantized training set and derive the circuit's clear matrices."""
    train = np.asarray(train)
    labels = np.asarray(labels)
    if train.ndim != 2 or train.shape[0] == 0 or train.shape[1] == 0:
        raise ValueError(f"training set must be a non-empty 2-D array, got shape {train.shape}")
    if not np.issubdtype(train.dtype, np.integer):
        raise ValueError("training set must hold quantized integers; quantize it first")
    max_level = (1 << bits) - 1
    if train.min() < 0 or train.max() > max_level:
        raise ValueError(f"training levels must lie in [0, {max_level}] for {bits}-bit features")
    n = train.shape[0]
    if labels.shape != (n,):
        raise ValueError(f"expected {n} labels, got shape {labels.shape}")
    if n_classes < 2:
        raise ValueError("a classifier needs at least two classes; the training labels have one")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= n_classes:
        raise ValueError(f"labels must be class indices in [0, {n_classes})")
    if n < 2:
        raise ValueError("the training set needs at least two points to compare distances")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and n = {n}, got {k}")

    train = train.astype(np.int64)
    first, second = np.triu_indices(n, 1)
    squares = (train**2).sum(axis=1)
    c = squares[first] - squares[second]
    weights = (train[second] - train[first]).T.copy()  # u_ij as columns
    offsets = -((-c) // 2) - 1  # ceil(c/2) - 1
    lowest = offsets + np.minimum(weights, 0).sum(axis=0) * max_level
    highest = offsets + np.maximum(weights, 0).sum(axis=0) * max_level

    n_pairs = first.shape[0]
    rank_matrix = np.zeros((n_pairs, n), dtype=np.int64)
    rank_matrix[np.arange(n_pairs), second] = 1
    rank_matrix[np.arange(n_pairs), first] = -1
    rank_offsets = (n - 1 - np.arange(n)).astype(np.int64)

    return KnnPlan(
        train=train,
        labels=labels.astype(np.int64),
        n_classes=int(n_classes),
        k=int(k),
        bits=int(bits),
        pair_weights=weights,
        pair_offsets=offsets.astype(np.int64),
        rank_matrix=rank_matrix,
        rank_offsets=rank_offsets,
        onehot=np.eye(n_classes, dtype=np.int64)[labels],
        difference_bits=signed_bit_width(int(lowest.min()), int(highest.max())),
    )


def vote_scores(votes: np.ndarray, n_classes: int) -> np.ndarray:
    """Distinct scores ``votes_c * C + (C - 1 - c)``: the maximum picks the winning class."""
    return votes * n_classes + (n_classes - 1 - np.arange(n_classes))


def class_from_best_score(best: np.ndarray | int, n_classes: int) -> np.ndarray | int:
    return n_classes - 1 - best % n_classes
