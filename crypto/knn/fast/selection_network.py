"""An oblivious selection network for the k-th smallest of n values, written once for numpy arrays
and concrete tracers alike.

The network (``crypto.knn.fast.plan``, step 3; cf. Batcher's merging networks and the top-k
selection of KU Leuven COSIC's ppknn): the n values are padded to a multiple of k with a value no
smaller than any of them, split into G = n_padded / k groups laid out as k *rows* of G columns
(row r holds the r-th member of every group), each column sorted by odd-even transposition, then
columns are merged pairwise keeping the k smallest. Merging two ascending columns a and b:
``c_i = min(a_i, b_{k-1-i})`` gives the k smallest of the union as an up-down (bitonic) sequence,
which is then sorted by :func:`unimodal_layers`; at the final merge only ``max_i c_i`` is needed,
which is the k-th smallest.

Every comparator layer is a single call of ``exchange(a, b) -> (lo, hi)`` or ``minimum(a, b)`` on
the concatenation of all the comparators' operands, so the circuit evaluates a layer as one tensor
lookup. The first axis of every array is the column (group) axis; the reference may carry a second
(query) axis. :func:`comparator_count` gives the number of comparators (= lookups in the circuit).
:func:`k_smallest` keeps the k smallest sorted and :func:`merge_columns` merges sorted k-lists: a
split evaluation (``crypto.knn.split``) selects within partitions and merges their lists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Exchange = Callable[[Any, Any], tuple[Any, Any]]  # numpy arrays or concrete tracers
Minimum = Callable[[Any, Any], Any]


def concatenate(parts: list) -> Any:
    """Join arrays (or tracers) along axis 0; one part is returned as it is."""
    return parts[0] if len(parts) == 1 else np.concatenate(tuple(parts), axis=0)


def _layer(rows: list, pairs: list[tuple[int, int]], exchange: Exchange) -> list:
    """Compare-exchange rows i < j for every (i, j) in ``pairs`` in one call: row i gets the min."""
    if not pairs:
        return rows
    width = rows[0].shape[0]
    lo, hi = exchange(concatenate([rows[i] for i, _ in pairs]), concatenate([rows[j] for _, j in pairs]))
    rows = list(rows)
    for position, (i, j) in enumerate(pairs):
        rows[i] = lo[position * width : (position + 1) * width]
        rows[j] = hi[position * width : (position + 1) * width]
    return rows


def sort_rows(rows: list, exchange: Exchange) -> list:
    """Odd-even transposition sort of every column (k layers, k(k-1)/2 comparators per column)."""
    k = len(rows)
    for layer in range(k):
        rows = _layer(rows, [(i, i + 1) for i in range(layer % 2, k - 1, 2)], exchange)
    return rows


def unimodal_layers(k: int) -> list[list[tuple[int, int]]]:
    """Comparator layers that sort any *up-down* sequence of length k (increasing, then
    decreasing), such as ``c_i = min(a_i, b_{k-1-i})`` of two ascending columns: the bitonic
    merger (k/2 log2 k comparators) for k a power of two; for k = 3, (0, 2) puts the minimum,
    which sits at an end, first, then (1, 2); otherwise odd-even transposition (k(k-1)/2)."""
    if k >= 2 and k & (k - 1) == 0:
        layers, span = [], k // 2
        while span:
            layers.append([(i, i + span) for i in range(k) if i % (2 * span) < span])
            span //= 2
        return layers
    if k == 3:
        return [[(0, 2)], [(1, 2)]]
    return [[(i, i + 1) for i in range(layer % 2, k - 1, 2)] for layer in range(k)]


def sort_unimodal(rows: list, exchange: Exchange) -> list:
    for pairs in unimodal_layers(len(rows)):
        rows = _layer(rows, pairs, exchange)
    return rows


def kth_smallest(values, k: int, pad: Callable[[int], Any], exchange: Exchange, minimum: Minimum, maximum):
    """The k-th smallest of ``values`` along axis 0 (with multiplicity).

    ``pad(m)`` returns m filler values (axis 0) no smaller than any value; ``exchange(a, b)``
    returns elementwise (min, max); ``minimum`` and ``maximum`` return one of them (one lookup).
    """
    if not 1 <= k <= values.shape[0]:
        raise ValueError(f"k must be between 1 and {values.shape[0]}, got {k}")
    rows = _sorted_columns(values, k, pad, exchange)
    return merge_columns(rows, k, exchange, minimum, maximum, keep="kth")


def k_smallest(values, k: int, pad: Callable[[int], Any], exchange: Exchange) -> list:
    """The k smallest of ``values`` along axis 0, ascending, as k rows of width 1 (row r holds the
    r-th smallest). The same network as :func:`kth_smallest`, except that the last merge sorts its
    up-down sequence (``unimodal_layers``) instead of taking its maximum. Fewer than k values are
    padded up to k with ``pad``."""
    if k < 1 or values.shape[0] < 1:
        raise ValueError(f"k and the number of values must be at least 1, got {k} and {values.shape[0]}")
    rows = _sorted_columns(values, k, pad, exchange)
    return merge_columns(rows, k, exchange, lambda a, b: exchange(a, b)[0], None, keep="sorted")


def _sorted_columns(values, k: int, pad: Callable[[int], Any], exchange: Exchange) -> list:
    missing = (-values.shape[0]) % k
    if missing:
        values = np.concatenate((values, pad(missing)), axis=0)
    groups = values.shape[0] // k
    return sort_rows([values[r * groups : (r + 1) * groups] for r in range(k)], exchange)


def merge_columns(rows: list, k: int, exchange: Exchange, minimum: Minimum, maximum, keep: str):
    """Merge G ascending columns (k rows of width G; row r holds every column's r-th value)
    pairwise, keeping the k smallest: ``keep="kth"`` returns the k-th smallest of all of them,
    ``keep="sorted"`` the k smallest, ascending, as k rows of width 1. Any G >= 1: the columns may
    be the groups of :func:`kth_smallest` or the sorted k-lists of several partitions of a
    training set (the k smallest of a union are among the k smallest of each part)."""
    groups = rows[0].shape[0]
    while groups > 1:
        half, odd = groups // 2, groups % 2
        firsts = [row[:half] for row in rows]
        seconds = [row[half : 2 * half] for row in rows]
        merged = minimum(concatenate(firsts), concatenate(seconds[::-1]))
        rows_c = [merged[i * half : (i + 1) * half] for i in range(k)]
        if groups == 2 and keep == "kth":
            return _max_of_rows(rows_c, maximum)
        rows_c = sort_unimodal(rows_c, exchange)
        if odd:
            rows_c = [concatenate([row_c, row[2 * half :]]) for row_c, row in zip(rows_c, rows, strict=True)]
        rows, groups = rows_c, half + odd
    return rows[k - 1][0] if keep == "kth" else rows


def _max_of_rows(rows: list, maximum) -> object:
    """Elementwise maximum over k rows of width 1, as a halving tournament (k - 1 comparators)."""
    while len(rows) > 1:
        half = len(rows) // 2
        paired = maximum(concatenate(rows[:half]), concatenate(rows[half : 2 * half]))
        rows = [paired[i : i + 1] for i in range(half)] + rows[2 * half :]
    return rows[0][0]


def comparator_count(n: int, k: int) -> int:
    """Comparators (= lookups in the circuit) that :func:`kth_smallest` uses."""
    groups = -(-n // k)
    return groups * (k * (k - 1) // 2) + merge_count(groups, k)


def k_smallest_count(n: int, k: int) -> int:
    """Comparators that :func:`k_smallest` uses: :func:`comparator_count`, except that the last
    merge sorts (``unimodal_layers``) instead of taking a maximum (k - 1)."""
    if -(-n // k) == 1:
        return comparator_count(n, k)
    return comparator_count(n, k) - (k - 1) + sum(len(layer) for layer in unimodal_layers(k))


def merge_count(columns: int, k: int) -> int:
    """Comparators that ``merge_columns(..., keep="kth")`` uses on ``columns`` sorted columns."""
    groups, total = columns, 0
    unimodal_cost = sum(len(layer) for layer in unimodal_layers(k))
    while groups > 1:
        half, odd = groups // 2, groups % 2
        total += half * k + ((k - 1) if groups == 2 else half * unimodal_cost)
        groups = half + odd
    return total
