"""The query box ``[0, max_level]^d`` that every k-NN circuit family shares: validating quantized
queries, the compile-time input set, and the bit width of a value range."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class QueryDomain(Protocol):
    """What the input set needs of a plan: its training points and the query box ``[0, max_level]^d``."""

    @property
    def train(self) -> np.ndarray: ...

    @property
    def d(self) -> int: ...

    @property
    def max_level(self) -> int: ...


class TrainingLevels:
    """``n``, ``d`` and the query box of a plan holding quantized training points ``train`` of
    ``bits`` bits (a mixin for every family's plan dataclass)."""

    train: np.ndarray
    bits: int

    @property
    def n(self) -> int:
        return int(self.train.shape[0])

    @property
    def d(self) -> int:
        return int(self.train.shape[1])

    @property
    def max_level(self) -> int:
        return (1 << self.bits) - 1


def check_queries(plan: QueryDomain, queries: np.ndarray) -> np.ndarray:
    """Validate quantized queries (1-D or 2-D) against the plan; returns a 2-D int64 array."""
    array = np.asarray(queries)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2 or array.shape[1] != plan.d:
        raise ValueError(f"a query must have {plan.d} features, got shape {np.shape(queries)}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError("queries must be quantized integers; use the model's quantizer first")
    if array.size and (array.min() < 0 or array.max() > plan.max_level):
        raise ValueError(f"query levels must lie in [0, {plan.max_level}]")
    return array.astype(np.int64)


def compile_inputset(plan: QueryDomain, seed: int = 0, random_queries: int = 64) -> list[np.ndarray]:
    """Queries that drive compilation: the training points, seeded random points and, for small d,
    every corner of the query box. Bit widths do not depend on it (see ``fhe.hint`` above)."""
    rng = np.random.default_rng(seed)
    queries = list(plan.train)
    queries += list(rng.integers(0, plan.max_level + 1, size=(random_queries, plan.d)))
    if plan.d <= 8:
        grid = np.array(np.meshgrid(*[[0, plan.max_level]] * plan.d)).reshape(plan.d, -1).T
        queries += list(grid)
    else:
        queries += [np.zeros(plan.d, dtype=np.int64), np.full(plan.d, plan.max_level)]
    return [np.asarray(q, dtype=np.int64) for q in queries]


def signed_bit_width(lowest: int, highest: int) -> int:
    """Smallest two's-complement width holding every integer in [lowest, highest]."""
    width = 1
    while not (-(1 << (width - 1)) <= lowest and highest <= (1 << (width - 1)) - 1):
        width += 1
    return width
