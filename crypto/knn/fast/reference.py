"""Clear reference of the fast exact k-NN: the same integer algorithm as ``crypto.knn.fast.circuit``.

Steps (``crypto.knn.fast.plan``): coarse per-feature distances from the public table, optional
second coarsening, the k-th smallest distance by the same selection network
(``crypto.knn.fast.selection_network``), every point at or below it votes (all ties at the k-th distance
included), most votes wins with the smallest class index among equal votes. The encrypted class
must equal :func:`classify` on every query. :func:`classify_by_sorting` states the same rule with a
plain sort, written independently, as the oracle for tests and the fast scorer for selection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from petlab.crypto.knn.fast.plan import (
    FastKnnPlan,
    coarsen_table,
    feature_cost_table,
    pair_matrices,
)
from petlab.crypto.knn.fast.selection_network import kth_smallest
from petlab.crypto.knn.ranges import check_queries


@dataclass(frozen=True)
class FastTrace:
    """Intermediate values for a batch of queries (rows)."""

    distances: np.ndarray  # (m, n) coarse distances
    kth: np.ndarray  # (m,) D_k
    mask: np.ndarray  # (m, n) 1 where d_i <= D_k
    votes: np.ndarray  # (m, C)
    classes: np.ndarray  # (m,)


def distances(plan: FastKnnPlan, queries: np.ndarray) -> np.ndarray:
    """Coarse distances (m, n) through the per-(feature, distinct value) lookups (steps 1-2)."""
    q = check_queries(plan, queries)
    costs = plan.cost_tables()[np.arange(plan.n_lookups)[None, :], (q @ plan.selector())]
    raw = costs @ plan.lookup_matrix
    return coarsen_table(plan.scale)[raw] if plan.scale.coarsened else raw


def _exchange(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low = b + np.minimum(a - b, 0)  # the circuit's one-lookup compare-exchange
    return low, a + b - low


def kth_distance(plan: FastKnnPlan, dist: np.ndarray) -> np.ndarray:
    """D_k for each row of ``dist`` (m, n) by the circuit's selection network."""
    m = dist.shape[0]
    return kth_smallest(
        dist.T,
        plan.k,
        pad=lambda count: np.full((count, m), plan.scale.distance_max, dtype=np.int64),
        exchange=_exchange,
        minimum=lambda a, b: _exchange(a, b)[0],
        maximum=lambda a, b: _exchange(a, b)[1],
    )


def winner(votes: np.ndarray, n_classes: int) -> np.ndarray:
    """Step 5: pairwise ``[votes_c >= votes_c']`` bits, ``win_c = [wins_c == C - 1]``."""
    diff, win, offsets = pair_matrices(n_classes)
    beats = ((votes @ diff - 1) < 0).astype(np.int64)
    wins = beats @ win + offsets
    return ((wins == n_classes - 1).astype(np.int64) @ np.arange(n_classes)).astype(np.int64)


def trace(plan: FastKnnPlan, queries: np.ndarray) -> FastTrace:
    dist = distances(plan, queries)
    kth = np.asarray(kth_distance(plan, dist), dtype=np.int64).reshape(-1)
    mask = (dist <= kth[:, None]).astype(np.int64)
    votes = mask @ plan.onehot
    return FastTrace(dist, kth, mask, votes, winner(votes, plan.n_classes))


def classify(plan: FastKnnPlan, queries: np.ndarray) -> np.ndarray:
    """Class index for each quantized query (a 1-D query gives a 1-element array)."""
    return trace(plan, queries).classes


def classify_by_sorting(
    train: np.ndarray,
    labels: np.ndarray,
    k: int,
    n_classes: int,
    queries: np.ndarray,
    bits: int,
    distance_bits: int | None = None,
) -> np.ndarray:
    """The fast rule by brute force: coarse distances by direct table indexing, D_k by a sort,
    all points with d <= D_k vote, the first class with the most votes (numpy's argmax)."""
    from petlab.crypto.knn.fast.plan import choose_scale, default_distance_bits

    train = np.asarray(train, dtype=np.int64)
    q = np.atleast_2d(np.asarray(queries, dtype=np.int64))
    if distance_bits is None:
        distance_bits = default_distance_bits(train.shape[1])
    scale = choose_scale(train.shape[1], bits, distance_bits)
    table = feature_cost_table(bits, scale)
    raw = np.zeros((q.shape[0], train.shape[0]), dtype=np.int64)
    for j in range(train.shape[1]):  # one feature at a time: half the time of one 3-D gather
        raw += table[q[:, j]][:, train[:, j]]
    dist = coarsen_table(scale)[raw] if scale.coarsened else raw
    kth = np.sort(dist, axis=1)[:, k - 1 : k]
    inside = dist <= kth
    votes = np.stack([(inside & (np.asarray(labels) == c)).sum(axis=1) for c in range(n_classes)], axis=1)
    return votes.argmax(axis=1)
