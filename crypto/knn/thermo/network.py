"""Per-class selection network: the k smallest distances of every class, sorted, then D_k.

The network is *clear data* (which slots each layer compares), built once per plan by symbolic
execution and run by :meth:`MergeProgram.run` on numpy arrays (the reference) and on concrete
tracers (the circuit) alike, so the two cannot drift apart.

Slots are positions in a growing vector: the n inputs first, then each layer appends its n_l
minima and n_l maxima. ``FILLER`` (``None``) stands for a clear value no smaller than any distance;
a comparator with a filler operand is decided at build time and costs nothing.

Merging two ascending lists a and b (each padded to k with fillers) keeping the k smallest:
``c_i = min(a_i, b_{k-1-i})`` gives the k smallest of the union as an up-down (bitonic) sequence
(k comparators), sorted by :func:`unimodal_layers` (2 comparators for k = 3); the final merge of
the D_k tree only needs ``max_i c_i`` (k - 1 comparators). Cf. Batcher's bitonic merger and the
top-k selection of KU Leuven COSIC's ppknn. Starting from single points, rounds of pairwise merges
cost, for k = 3: 1 comparator per two points (pairs), 3 per two pairs (3 smallest of 4), 5 per two
3-lists: about 2.5 comparators per point (the fast family's groups of k cost about 2.7).

Every layer is ONE tensor lookup in the circuit (all its comparators side by side), so the depth
is the number of layers and the cost the number of comparators.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

FILLER = None
Slot = int | None
SortedList = tuple[Slot, ...]


def unimodal_layers(k: int) -> list[list[tuple[int, int]]]:
    """Comparator layers that sort any up-down sequence of length k: the bitonic merger for k a
    power of two; for k = 3, (0, 2) puts the minimum (at an end) first, then (1, 2); otherwise
    odd-even transposition."""
    if k >= 2 and k & (k - 1) == 0:
        layers, span = [], k // 2
        while span:
            layers.append([(i, i + span) for i in range(k) if i % (2 * span) < span])
            span //= 2
        return layers
    if k == 3:
        return [[(0, 2)], [(1, 2)]]
    return [[(i, i + 1) for i in range(layer % 2, k - 1, 2)] for layer in range(k)]


@dataclass(frozen=True)
class Layer:
    """One lookup layer: comparators ``(first[i], second[i])``; outputs the minima, then the maxima."""

    first: tuple[int, ...]
    second: tuple[int, ...]


@dataclass(frozen=True)
class MergeProgram:
    """A built network: ``n_inputs`` input slots, its layers, the sorted k-list of every class and
    (when built with :func:`finish`) the slot of D_k."""

    n_inputs: int
    layers: tuple[Layer, ...]
    lists: tuple[SortedList, ...]
    kth: Slot = FILLER

    @property
    def comparators(self) -> int:
        return sum(len(layer.first) for layer in self.layers)

    @property
    def real_list_slots(self) -> list[tuple[int, int]]:
        """(class, slot) of every list entry that is not a filler."""
        return [(c, s) for c, slots in enumerate(self.lists) for s in slots if s is not FILLER]

    def run(self, values: Any, exchange: Callable[[Any, Any], tuple[Any, Any]], concat: Callable) -> Any:
        """All slots: ``values`` (inputs along axis 0), then each layer's minima and maxima.
        ``exchange(a, b) -> (min, max)`` elementwise; ``concat(parts)`` joins along axis 0."""
        store = values
        for layer in self.layers:
            low, high = exchange(store[np.asarray(layer.first)], store[np.asarray(layer.second)])
            store = concat((store, low, high))
        return store


class _Builder:
    def __init__(self, n_inputs: int):
        self.n_inputs = n_inputs
        self.size = n_inputs
        self.layers: list[Layer] = []

    def exchange(self, pairs: Sequence[tuple[Slot, Slot]]) -> list[tuple[Slot, Slot]]:
        """(min, max) slots of every pair; pairs with a filler are free."""
        out: list[tuple[Slot, Slot]] = []
        real: list[tuple[int, int]] = []
        for x, y in pairs:
            if x is FILLER or y is FILLER:
                out.append((y if x is FILLER else x, FILLER))
            else:
                out.append((-1, -1))
                real.append((x, y))
        if real:
            count = len(real)
            self.layers.append(Layer(tuple(x for x, _ in real), tuple(y for _, y in real)))
            position = 0
            for i, (x, y) in enumerate(pairs):
                if x is not FILLER and y is not FILLER:
                    out[i] = (self.size + position, self.size + count + position)
                    position += 1
            self.size += 2 * count
        return out

    def merge(self, merges: Sequence[tuple[SortedList, SortedList]], k: int) -> list[SortedList]:
        """Each (a, b) -> its k smallest, ascending; all merges' comparators layer by layer."""
        pairs = [(a[i], b[k - 1 - i]) for a, b in merges for i in range(k)]
        lows = [low for low, _ in self.exchange(pairs)]
        lists = [list(lows[m * k : (m + 1) * k]) for m in range(len(merges))]
        for layer in unimodal_layers(k):
            done = self.exchange([(c[i], c[j]) for c in lists for i, j in layer])
            for m, c in enumerate(lists):
                for (i, j), (low, high) in zip(
                    layer, done[m * len(layer) : (m + 1) * len(layer)], strict=True
                ):
                    c[i], c[j] = low, high
        return [tuple(c) for c in lists]

    def kth(self, a: SortedList, b: SortedList, k: int) -> Slot:
        """The k-th smallest of the union of two ascending k-lists: ``max_i min(a_i, b_{k-1-i})``."""
        row = [low for low, _ in self.exchange([(a[i], b[k - 1 - i]) for i in range(k)])]
        while len(row) > 1:
            half = len(row) // 2
            highs = [high for _, high in self.exchange([(row[i], row[half + i]) for i in range(half)])]
            row = highs + row[2 * half :]
        return row[0]

    def program(self, lists: Sequence[SortedList], kth: Slot = FILLER) -> MergeProgram:
        return MergeProgram(self.n_inputs, tuple(self.layers), tuple(lists), kth)


def _class_lists(builder: _Builder, groups: Sequence[Sequence[int]], k: int) -> list[SortedList]:
    """Rounds of pairwise merges inside every class (classes side by side in each layer)."""
    lists: list[list[SortedList]] = [[(s,) + (FILLER,) * (k - 1) for s in group] for group in groups]
    while any(len(class_lists) > 1 for class_lists in lists):
        merges, owners = [], []
        for c, class_lists in enumerate(lists):
            for p in range(len(class_lists) // 2):
                merges.append((class_lists[2 * p], class_lists[2 * p + 1]))
                owners.append(c)
        merged = builder.merge(merges, k)
        rounds: list[list[SortedList]] = [[] for _ in lists]
        for c, result in zip(owners, merged, strict=True):
            rounds[c].append(result)
        for c, class_lists in enumerate(lists):
            if len(class_lists) % 2:
                rounds[c].append(class_lists[-1])
        lists = rounds
    return [class_lists[0] if class_lists else (FILLER,) * k for class_lists in lists]


def _kth_of(builder: _Builder, lists: Sequence[SortedList], k: int) -> Slot:
    lists = list(lists)
    while len(lists) > 2:
        pairs = len(lists) // 2
        merged = builder.merge([(lists[2 * p], lists[2 * p + 1]) for p in range(pairs)], k)
        lists = merged + lists[2 * pairs :]
    if len(lists) == 1:
        return lists[0][k - 1]
    return builder.kth(lists[0], lists[1], k)


def partition_program(labels: np.ndarray, n_classes: int, k: int) -> MergeProgram:
    """Inputs: one distance per point (``labels`` gives each point's class); output: every class's
    k smallest, ascending (fillers where a class has fewer than k points). No D_k."""
    builder = _Builder(len(labels))
    groups = [np.flatnonzero(np.asarray(labels) == c).tolist() for c in range(n_classes)]
    return builder.program(_class_lists(builder, groups, k))


def whole_program(labels: np.ndarray, n_classes: int, k: int) -> MergeProgram:
    """:func:`partition_program` followed by D_k over the class lists (one process)."""
    builder = _Builder(len(labels))
    groups = [np.flatnonzero(np.asarray(labels) == c).tolist() for c in range(n_classes)]
    lists = _class_lists(builder, groups, k)
    return builder.program(lists, _kth_of(builder, lists, k))


def merge_program(n_classes: int, k: int) -> MergeProgram:
    """Inputs: two partitions' class lists, ``(2 * C * k,)`` (class-major, ascending, the first
    partition's first); output: the merged class lists (C * (k + S(k)) comparators)."""
    builder = _Builder(2 * n_classes * k)

    def lists_at(offset: int) -> list[SortedList]:
        return [tuple(range(offset + c * k, offset + (c + 1) * k)) for c in range(n_classes)]

    first, second = lists_at(0), lists_at(n_classes * k)
    return builder.program(builder.merge(list(zip(first, second, strict=True)), k))


def finish_program(n_classes: int, k: int) -> MergeProgram:
    """Inputs: the class lists ``(C * k,)``; output: the same lists and the slot of D_k."""
    builder = _Builder(n_classes * k)
    lists = [tuple(range(c * k, (c + 1) * k)) for c in range(n_classes)]
    return builder.program(lists, _kth_of(builder, lists, k))
