"""Hierarchical domains for adaptive histograms ("Synthetic Data via Differential Privacy",
Sections 2-5): a record is a path of child indices, one per level.

* :class:`Quadtree`: points of [0, 1]^d; at level l the child index packs bit l of each
  coordinate's binary expansion, so a node is a cube of side 2^-l split into 2^d sub-cubes of
  half the side (Section 5.1: d = 4 for origin/destination latitude-longitude pairs, "sixteen
  sub-cubes of half the radius").
* :class:`Prefixes`: strings over an alphabet; the child at level l is the l-th character, or
  the terminal symbol (index len(alphabet)) once the string has ended, so "abc" lies under
  a, ab, abc, abc$. A terminal node holds identical records and is never split further.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Quadtree:
    dims: int

    @property
    def branching(self) -> int:
        return 2**self.dims

    def prepare(self, records) -> np.ndarray:
        points = np.asarray(records, dtype=float)
        if points.ndim != 2 or points.shape[1] != self.dims:
            raise ValueError(f"expected an array of shape (records, {self.dims})")
        if not np.isfinite(points).all() or (points < 0).any() or (points > 1).any():
            raise ValueError("quadtree points must lie in [0, 1]^d")
        return np.minimum(points, np.nextafter(1.0, 0.0))  # 1.0 belongs to the last cell

    def child(self, points: np.ndarray, level: int) -> np.ndarray:
        bits = (np.floor(points * 2 ** (level + 1)).astype(np.int64)) & 1
        return (bits << np.arange(self.dims)).sum(axis=1)

    def is_terminal(self, child: int) -> bool:
        return False

    def diameter(self, level: int) -> float:
        """Euclidean diameter of a node at ``level`` (the root is level 0)."""
        return float(np.sqrt(self.dims) / 2**level)

    def node_box(self, path: tuple[int, ...]) -> tuple[np.ndarray, float]:
        """Lower corner and side of the node reached by ``path``."""
        corner = np.zeros(self.dims)
        for level, child in enumerate(path):
            corner += ((child >> np.arange(self.dims)) & 1) / 2 ** (level + 1)
        return corner, 1.0 / 2 ** len(path)

    def sample(self, path: tuple[int, ...], count: int, rng: np.random.Generator) -> np.ndarray:
        corner, side = self.node_box(path)
        return corner + rng.random((count, self.dims)) * side

    def collect(self, parts: list[np.ndarray]) -> np.ndarray:
        """One record array from the samples of several nodes."""
        return np.concatenate(parts) if parts else np.empty((0, self.dims))


@dataclass(frozen=True)
class Prefixes:
    alphabet: str

    def __post_init__(self) -> None:
        if not self.alphabet or len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError("the alphabet needs distinct characters")

    @property
    def branching(self) -> int:
        return len(self.alphabet) + 1

    def prepare(self, records) -> np.ndarray:
        strings = list(records)
        allowed = set(self.alphabet)
        for s in strings:
            if not isinstance(s, str) or not set(s) <= allowed:
                raise ValueError(f"{s!r} is not a string over the alphabet {self.alphabet!r}")
        longest = max((len(s) for s in strings), default=0)
        table = np.full((len(strings), longest + 1), len(self.alphabet), dtype=np.int64)
        lookup = {c: i for i, c in enumerate(self.alphabet)}
        for row, s in enumerate(strings):
            table[row, : len(s)] = [lookup[c] for c in s]
        return table

    def child(self, table: np.ndarray, level: int) -> np.ndarray:
        if level >= table.shape[1]:
            return np.full(len(table), len(self.alphabet), dtype=np.int64)
        return table[:, level]

    def is_terminal(self, child: int) -> bool:
        return child == len(self.alphabet)

    def label(self, path: tuple[int, ...]) -> str:
        return "".join(self.alphabet[c] for c in path if c < len(self.alphabet))

    def sample(self, path: tuple[int, ...], count: int, rng: np.random.Generator) -> list[str]:
        return [self.label(path)] * count

    def collect(self, parts: list[list[str]]) -> list[str]:
        return [record for part in parts for record in part]
