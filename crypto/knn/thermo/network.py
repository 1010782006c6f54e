"""Per-class selection network: the k smallest distances of every class, sorted, then D_k.

The network is *clear data* (which slots each layer compares), built once per plan by symbolic
execution and run by :meth:`MergeProgram.run` on numpy arrays (the reference) and on concrete
tracers (the circuit) alike, so the two cannot drift apart.

Slots are positions in a growing vector: the n inputs first, then each layer appends its n_l
minima and n_l maxima. ``FILLER`` (``None``) stands for a clear value no smaller than any distance;
a comparator with a filler operand is decided at build time and costs nothing.

Each class's k smallest, ascending (:meth:`_Builder.select`): compare the points in pairs; the k
smallest of the class are among the k smallest pair minima and the floor(k/2) smallest pair maxima
(for k = 3: the single smallest maximum), so recurse on both halves and merge. About 2
comparators per point for k = 3 (Iris n = 40: 87 with D_k, against 96 for rounds of pairwise
merges of sorted 3-lists, about 2.5 per point); Alekseev's lower bound for selecting the 3
smallest is 2 (n - 3). Merging two ascending lists a and b (each padded to k with fillers)
keeping the k smallest: ``c_i = min(a_i, b_{k-1-i})`` gives the k smallest of the union as an
up-down (bitonic) sequence (k comparators), sorted by :func:`unimodal_layers` (2 comparators for
k = 3); the D_k tree's last merge only needs ``max_i c_i`` (k - 1 comparators). Cf. Batcher's
bitonic merger and the top-k selection of KU Leuven COSIC's ppknn.

Comparators are recorded first and laid out last (:meth:`_Builder.program`): one whose outputs
nothing uses is dropped, and each of the rest goes to the first layer after its operands exist,
so the classes' networks run side by side.

Every layer is ONE tensor lookup in the circuit (all its comparators side by side), so the depth
is the number of layers and the cost the number of comparators.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from petlab.crypto.knn.fast.selection_network import unimodal_layers  # the same merger

FILLER = None
Slot = int | None
SortedList = tuple[Slot, ...]


def _unimodal_cost(k: int) -> int:
    return sum(len(layer) for layer in unimodal_layers(k))


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

    def run(self, values: Any, exchange: Callable[[Any, Any], tuple[Any, Any]], concat: Callable) -> Any:
        """All slots: ``values`` (inputs along axis 0), then each layer's minima and maxima.
        ``exchange(a, b) -> (min, max)`` elementwise; ``concat(parts)`` joins along axis 0."""
        store = values
        for layer in self.layers:
            low, high = exchange(store[np.asarray(layer.first)], store[np.asarray(layer.second)])
            store = concat((store, low, high))
        return store


class _Builder:
    """Records comparators on node ids (inputs ``0 .. n_inputs - 1``, then ``n_inputs + 2 c`` and
    ``n_inputs + 2 c + 1`` for the minimum and maximum of comparator ``c``); :meth:`program` drops
    the comparators no output depends on and layers the rest as soon as their operands exist."""

    def __init__(self, n_inputs: int):
        self.n_inputs = n_inputs
        self.comparators: list[tuple[int, int]] = []

    def exchange(self, pairs: Sequence[tuple[Slot, Slot]]) -> list[tuple[Slot, Slot]]:
        """(min, max) of every pair; pairs with a filler are free."""
        out: list[tuple[Slot, Slot]] = []
        for x, y in pairs:
            if x is FILLER or y is FILLER:
                out.append((y if x is FILLER else x, FILLER))
            else:
                node = self.n_inputs + 2 * len(self.comparators)
                self.comparators.append((x, y))
                out.append((node, node + 1))
        return out

    def sort_unimodal(self, values: list[Slot], k: int) -> list[Slot]:
        for layer in unimodal_layers(k):
            done = self.exchange([(values[i], values[j]) for i, j in layer])
            for (i, j), (low, high) in zip(layer, done, strict=True):
                values[i], values[j] = low, high
        return values

    def merge(self, merges: Sequence[tuple[SortedList, SortedList]], k: int) -> list[SortedList]:
        """Each (a, b) -> its k smallest, ascending: ``c_i = min(a_i, b_{k-1-i})`` is up-down,
        then :func:`unimodal_layers` sorts it."""
        out = []
        for a, b in merges:
            c = [low for low, _ in self.exchange([(a[i], b[k - 1 - i]) for i in range(k)])]
            out.append(tuple(self.sort_unimodal(c, k)))
        return out

    def select(self, slots: Sequence[Slot], k: int) -> SortedList:
        """The k smallest of ``slots``, ascending (fillers where fewer than k), by pairs.

        Compare the slots in pairs (x_i <= y_i; an odd last slot joins the x's). The j-th smallest
        y (j >= 1) is above its own x and the j - 1 smaller y's and their x's, so it ranks 2j or
        later: the k smallest of all are among the k smallest x's and the floor(k/2) smallest y's.
        Recursing on both and merging gives about 2 comparators per point for k = 3 (n/2 pairs,
        n/2 - 1 for the smallest y, then the same on the n/2 x's), against about 2.5 for rounds
        of pairwise merges (Alekseev's lower bound for selecting the 3 smallest: 2 (n - 3)).
        The merge is cheaper than :meth:`merge`: the smallest x is below every y, so
        ``c_0 = x_0`` is the minimum and only ``c_1 .. c_{k-1}`` (still up-down) need sorting.
        Exact for any values, ties included: a comparator network that selects correctly on every
        0/1 input selects correctly on every input (the 0-1 principle; the tests check both)."""
        slots = list(slots)
        if len(slots) <= 1 or k == 0:
            return (tuple(slots) + (FILLER,) * k)[:k]
        done = self.exchange([(slots[2 * i], slots[2 * i + 1]) for i in range(len(slots) // 2)])
        xs = [low for low, _ in done] + slots[2 * (len(slots) // 2) :]
        ys = [high for _, high in done]
        low_list = self.select(xs, k)
        if k // 2 == 0:
            return low_list
        high_list = self.select(ys, k // 2) + (FILLER,) * (k - k // 2)
        c = [low for low, _ in self.exchange([(low_list[i], high_list[k - 1 - i]) for i in range(k)])]
        if _unimodal_cost(k - 1) <= _unimodal_cost(k):
            return (c[0], *self.sort_unimodal(c[1:], k - 1))
        return tuple(self.sort_unimodal(c, k))

    def kth(self, a: SortedList, b: SortedList, k: int) -> Slot:
        """The k-th smallest of the union of two ascending k-lists: ``max_i min(a_i, b_{k-1-i})``."""
        row = [low for low, _ in self.exchange([(a[i], b[k - 1 - i]) for i in range(k)])]
        while len(row) > 1:
            half = len(row) // 2
            highs = [high for _, high in self.exchange([(row[i], row[half + i]) for i in range(half)])]
            row = highs + row[2 * half :]
        return row[0]

    def program(self, lists: Sequence[SortedList], kth: Slot = FILLER) -> MergeProgram:
        """Layers: every needed comparator at depth 1 + its operands' depth, all of one depth side
        by side (one lookup each); node ids become slots (inputs, then each layer's minima and
        maxima)."""
        n = self.n_inputs
        wanted = {s for slots in lists for s in slots if s is not FILLER}
        if kth is not FILLER:
            wanted.add(kth)
        needed = [False] * len(self.comparators)
        for c in range(len(self.comparators) - 1, -1, -1):
            if n + 2 * c in wanted or n + 2 * c + 1 in wanted:
                needed[c] = True
                wanted.update(self.comparators[c])
        depth = [0] * len(self.comparators)

        def depth_of(node: int) -> int:
            return 0 if node < n else depth[(node - n) // 2]

        by_depth: dict[int, list[int]] = {}
        for c, (x, y) in enumerate(self.comparators):
            if needed[c]:
                depth[c] = 1 + max(depth_of(x), depth_of(y))
                by_depth.setdefault(depth[c], []).append(c)
        slot_of = {i: i for i in range(n)}
        layers, size = [], n
        for level in sorted(by_depth):
            members = by_depth[level]
            layers.append(
                Layer(
                    tuple(slot_of[self.comparators[c][0]] for c in members),
                    tuple(slot_of[self.comparators[c][1]] for c in members),
                )
            )
            for position, c in enumerate(members):
                slot_of[n + 2 * c] = size + position
                slot_of[n + 2 * c + 1] = size + len(members) + position
            size += 2 * len(members)

        def slot(node: Slot) -> Slot:
            return FILLER if node is FILLER else slot_of[node]

        return MergeProgram(n, tuple(layers), tuple(tuple(map(slot, s)) for s in lists), slot(kth))


def _class_lists(builder: _Builder, groups: Sequence[Sequence[int]], k: int) -> list[SortedList]:
    """Every class's k smallest, ascending (:meth:`_Builder.select`; classes side by side in
    each layer)."""
    return [builder.select(group, k) for group in groups]


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
