"""Clear reference of the thermometer family: the same integer algorithm as its circuit.

Steps (``crypto.knn.thermo.plan``): raw distances from the code by the plan's clear matrix, the
reduction, the per-class network run by the *same* program object as the circuit, votes capped at
k per class, the first class with the most votes. :func:`classify_code` takes any code (malformed
ones too); :func:`classify_by_sorting` states the rule with a table lookup and a sort, written
independently, as the oracle for tests and the scorer for training-point selection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from petlab.crypto.knn.ranges import check_queries
from petlab.crypto.knn.thermo.encoding import thermometer
from petlab.crypto.knn.thermo.plan import (
    DistanceChoice,
    DistanceSpec,
    ThermoPlan,
    counted_positions,
    default_spec,
    spec_for,
)


@dataclass(frozen=True)
class ThermoTrace:
    """Intermediate values for a batch of queries (rows)."""

    distances: np.ndarray  # (m, n) after the reduction
    lists: np.ndarray  # (m, C, k) each class's k smallest, ascending (filler where missing)
    kth: np.ndarray  # (m,) D_k
    votes: np.ndarray  # (m, C) the rule's capped votes
    classes: np.ndarray  # (m,) the winner, from the counted entries (plan.counted_positions)


def exchange(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The circuit's compare-exchange: one ``r = max(b - a, 0)``, then min and max linearly."""
    shortfall = np.maximum(b - a, 0)
    return b - shortfall, a + shortfall


def lists_and_kth(plan: ThermoPlan, distances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run the plan's network on ``distances`` (m, n): class lists (m, C, k) and D_k (m,)."""
    store = plan.program.run(distances.T, exchange, lambda parts: np.concatenate(parts, axis=0))
    m = distances.shape[0]
    filler = np.full(m, plan.spec.filler, dtype=np.int64)
    lists = np.stack(
        [
            np.stack([filler if s is None else store[s] for s in slots], axis=1)
            for slots in plan.program.lists
        ],
        axis=1,
    )
    kth = filler if plan.program.kth is None else store[plan.program.kth]
    return lists, kth


def winner(votes: np.ndarray) -> np.ndarray:
    """Most votes; the smallest class index among equal votes (numpy's argmax keeps the first)."""
    return np.asarray(votes).argmax(axis=-1).astype(np.int64)


def trace_code(plan: ThermoPlan, codes: np.ndarray) -> ThermoTrace:
    """The algorithm on encoded queries (any 0/1 rows of ``plan.code_length``)."""
    codes = np.atleast_2d(np.asarray(codes, dtype=np.int64))
    if codes.shape[1] != plan.code_length:
        raise ValueError(f"a code has {plan.code_length} bits, got shape {codes.shape}")
    distances = plan.spec.reduce(codes @ plan.weights + plan.offsets)
    lists, kth = lists_and_kth(plan, distances)
    inside = lists <= kth[:, None, None]
    votes = inside.sum(axis=2)
    counted = inside[:, :, counted_positions(plan.n_classes, plan.k)].sum(axis=2)
    return ThermoTrace(distances, lists, kth, votes, winner(counted))


def trace(plan: ThermoPlan, queries: np.ndarray) -> ThermoTrace:
    return trace_code(plan, thermometer(check_queries(plan, queries), plan.bits))


def classify(plan: ThermoPlan, queries: np.ndarray) -> np.ndarray:
    """Class index for each quantized query (a 1-D query gives a 1-element array)."""
    return trace(plan, queries).classes


def classify_code(plan: ThermoPlan, codes: np.ndarray) -> np.ndarray:
    return trace_code(plan, codes).classes


def coarse_distances(train: np.ndarray, queries: np.ndarray, spec: DistanceSpec) -> np.ndarray:
    """(m, n) distances by direct table indexing and the reduction (no code, no matrix)."""
    q = np.atleast_2d(np.asarray(queries, dtype=np.int64))
    train = np.asarray(train, dtype=np.int64)
    raw = np.zeros((q.shape[0], train.shape[0]), dtype=np.int64)
    table = spec.table()
    for f in range(train.shape[1]):
        raw += table[q[:, f][:, None], train[:, f][None, :]]
    return spec.reduce(raw)


def selection_rule(bits: int, distance: DistanceChoice | None = None):
    """The rule training-point selection scores subsets with (the family's ``selection_rule``)."""

    def rule(train, labels, k, n_classes, queries):
        spec = spec_for(np.shape(train)[1], bits, distance)
        return classify_by_sorting(train, labels, k, n_classes, queries, bits, spec)

    return rule


def classify_by_sorting(
    train: np.ndarray,
    labels: np.ndarray,
    k: int,
    n_classes: int,
    queries: np.ndarray,
    bits: int,
    spec: DistanceSpec | None = None,
) -> np.ndarray:
    """The rule by brute force: coarse distances, D_k by a sort, each class counts its points at
    distance <= D_k up to k, the first class with the most votes."""
    train = np.asarray(train, dtype=np.int64)
    labels = np.asarray(labels)
    spec = spec or default_spec(train.shape[1], bits)
    distances = coarse_distances(train, queries, spec)
    kth = np.partition(distances, k - 1, axis=1)[:, k - 1 : k]
    inside = distances <= kth
    votes = np.stack([np.minimum(k, (inside & (labels == c)).sum(axis=1)) for c in range(n_classes)], axis=1)
    return winner(votes)
