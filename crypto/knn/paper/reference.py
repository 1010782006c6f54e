"""Clear reference of HE-kNN-V: the same integer algorithm as the circuit, in numpy.

Every step mirrors ``crypto.knn.paper.circuit`` on the same
:class:`petlab.crypto.knn.paper.plan.KnnPlan` (Ameur et al., PSD 2022, Section 3.3): distance
differences, delta matrix, ranks by column sums, the mask ``rank < k``, the vote and the score
argmax. The encrypted result must equal this on every query.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from petlab.crypto.knn.paper.plan import KnnPlan, class_from_best_score, vote_scores
from petlab.crypto.knn.ranges import check_queries


@dataclass(frozen=True)
class ReferenceTrace:
    """Intermediate values for a batch of queries (rows), for tests and diagnostics."""

    differences: np.ndarray  # (m, P) e_ij
    ranks: np.ndarray  # (m, n)
    mask: np.ndarray  # (m, n) 1 where the point is among the k nearest
    votes: np.ndarray  # (m, C)
    classes: np.ndarray  # (m,)


def trace(plan: KnnPlan, queries: np.ndarray) -> ReferenceTrace:
    """Run the clear algorithm on a batch of quantized queries."""
    q = check_queries(plan, queries)
    differences = q @ plan.pair_weights + plan.pair_offsets
    before = (differences < 0).astype(np.int64)
    ranks = before @ plan.rank_matrix + plan.rank_offsets
    mask = (ranks < plan.k).astype(np.int64)
    votes = mask @ plan.onehot
    best = vote_scores(votes, plan.n_classes).max(axis=1)
    classes = class_from_best_score(best, plan.n_classes)
    return ReferenceTrace(differences, ranks, mask, votes, np.asarray(classes, dtype=np.int64))


def classify(plan: KnnPlan, queries: np.ndarray) -> np.ndarray:
    """Class index for each quantized query (a 1-D query gives a 1-element array)."""
    return trace(plan, queries).classes


def classify_by_sorting(
    train: np.ndarray, labels: np.ndarray, k: int, n_classes: int, queries: np.ndarray
) -> np.ndarray:
    """Textbook quantized k-NN, written independently of the plan: a stable sort of squared
    distances (equal distances keep the smaller index first), the first k labels, the most frequent
    one (the smallest class index among equal counts). Used for training-set selection and as the
    oracle the plan-based reference is tested against."""
    train = np.asarray(train, dtype=np.int64)
    q = np.atleast_2d(np.asarray(queries, dtype=np.int64))
    distances = (q**2).sum(axis=1)[:, None] + (train**2).sum(axis=1)[None, :] - 2 * q @ train.T
    nearest = np.argsort(distances, axis=1, kind="stable")[:, :k]
    votes = (np.asarray(labels)[nearest][..., None] == np.arange(n_classes)).sum(axis=1)
    return votes.argmax(axis=1)
