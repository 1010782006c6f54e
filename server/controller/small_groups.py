"""Exact search for a group of fewer than t records whose count or sum a space of released
combinations determines (the release audit's last step, ``release_audit``).

The question. Columns are the small atoms (classes of fewer than t records that every released
functional weighs alike), with sizes s_c >= 1. Rows span V, the released combinations that vanish
on every large atom, over F_p (``modular``). A group U of atoms has its count (and every column's
sum) determined exactly when 1_U lies in V. Is there z in V with z in {0,1}^w, z != 0 and
sum of s_c over z's support < t?

The method, exact (a certificate either way, no sampling):

* Reduce V to RREF, rows R_1..R_d with pivot columns P. Every z in V is z = x R with x = z
  restricted to P, so a 0/1 z has a 0/1 x: z = sum of R_i over a set J of rows.
* z's support is J's pivots (|J| >= 1) plus T, its non-pivot columns; the sizes are >= 1 and
  total < t, so |T| <= t - 2.
* Split the non-pivot columns into t - 1 disjoint groups C_1..C_{t-1}. T meets at most t - 2 of
  them (pigeonhole), so z vanishes on some C_k, that is x lies in the left null space L_k of
  R[:, C_k]. If every L_k is {0}, no such z exists. Otherwise every solution lies in some
  V_k = L_k R, a space of smaller dimension: search each (recursively).
* Blocks: rows that share no column are searched apart (a minimal solution lies in one block).
* Dimension at most ``ENUMERATE`` (10): enumerate the sets J directly, in order of pivot size,
  dropping a branch once its pivots alone reach t records.

Cost: each node is one RREF of at most d x w plus t - 1 left null spaces of d x w/(t-1)
matrices, O(d^2 w) in all. On generic rows (the usual case) every L_k is {0} and the search ends at
the root; structured rows (a difference of two atoms, a swapped pair) leave small L_k, and a child
has a smaller dimension than its parent (each group of columns holds a nonzero column of the
reduced rows), so the search ends. The number of nodes is not bounded by a polynomial in d: the
question is the minimum-distance problem of a code restricted to 0/1 words. The search has no
budget of its own: a cap on it would refuse on a figure of the records (how V is structured), so
its time is bounded by the audit's clock instead (``audit_clock``: a check past it is answered
UNAVAILABLE, nothing recorded, and is no refusal), and ``release_audit`` runs it only when its
certificates (the split and the column certificate) do not already decide.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from petlab.server.controller.audit_clock import tick
from petlab.server.controller.modular import left_null_space, matmul, rref

ENUMERATE = 10


def find_group(
    rows: np.ndarray, sizes: np.ndarray, t: int, p: int, spent: list | None = None
) -> np.ndarray | None:
    """Columns of a 0/1 vector of the row space of ``rows`` (mod p) whose ``sizes`` total 1 to
    t - 1, or None if there is none. ``spent``: a list [nodes, work] that the search's own nodes
    and work (the sum over nodes of d^2 w, their reductions' cost) are added to (the caller's
    account)."""
    if t < 2:
        return None
    counter = [0, 0.0]
    try:
        return _find(rows, sizes, t, p, counter)
    finally:
        if spent is not None:
            spent[0] += counter[0]
            spent[1] += counter[1]


def _find(rows, sizes, t, p, counter) -> np.ndarray | None:
    sizes = np.asarray(sizes, dtype=np.int64)
    for block_rows, block_columns in blocks(np.asarray(rows, dtype=np.int64) % p):
        found = _search(block_rows, sizes[block_columns], t, p, counter)
        if found is not None:
            return block_columns[found]
    return None


def blocks(rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The rows grouped by shared columns (connected components of the bipartite graph of rows and
    their nonzero columns), each with its nonzero columns."""
    d, w = rows.shape
    row_index, column_index = np.nonzero(rows)
    graph = coo_matrix((np.ones(len(row_index)), (row_index, d + column_index)), shape=(d + w, d + w))
    _, component = connected_components(graph, directed=False)
    out = []
    for value in np.unique(component[:d]):
        members = np.flatnonzero(component[:d] == value)
        columns = np.flatnonzero(component[d:] == value)
        if len(columns):
            out.append((rows[np.ix_(members, columns)], columns))
    return out


def _search(rows: np.ndarray, sizes: np.ndarray, t: int, p: int, counter: list):
    counter[0] += 1
    counter[1] += float(len(rows)) ** 2 * rows.shape[1]
    tick()
    keep = np.flatnonzero(rows.any(axis=0))  # a column where all of V vanishes is never in z
    basis, pivots = rref(rows[:, keep], p)
    sizes = sizes[keep]
    if not len(basis):
        return None
    if len(basis) <= ENUMERATE:
        found = _enumerate(basis, pivots, sizes, t, p, counter)
        return None if found is None else keep[found]
    is_pivot = np.zeros(basis.shape[1], dtype=bool)
    is_pivot[pivots] = True
    free = np.flatnonzero(~is_pivot)
    if len(free) < t - 1:  # too few columns to split: T may cover them all
        found = _enumerate(basis, pivots, sizes, t, p, counter)
        return None if found is None else keep[found]
    for k in range(t - 1):
        null = left_null_space(basis[:, free[k :: t - 1]], p)
        if not len(null):
            continue  # only z = 0 vanishes on this group
        for sub_rows, sub_columns in blocks(matmul(null, basis, p)):
            found = _search(sub_rows, sizes[sub_columns], t, p, counter)
            if found is not None:
                return keep[sub_columns[found]]
    return None


def _enumerate(basis, pivots, sizes, t, p, counter):
    """Every set J of rows whose pivot atoms total fewer than t records (depth first, smallest
    pivots first, so a branch stops at the first row that would reach t)."""
    order = np.argsort(sizes[pivots], kind="stable")
    pivot_sizes = sizes[pivots][order]
    ordered = basis[order]

    def extend(start: int, current: np.ndarray, total: int):
        for j in range(start, len(ordered)):
            grown = total + int(pivot_sizes[j])
            if grown >= t:
                return None
            counter[0] += 1
            if not counter[0] % 4096:
                tick()
            combined = (current + ordered[j]) % p
            if np.all(combined <= 1):
                ones = np.flatnonzero(combined)
                if int(sizes[ones].sum()) < t:
                    return ones
            found = extend(j + 1, combined, grown)
            if found is not None:
                return found
        return None

    return extend(0, np.zeros(basis.shape[1], dtype=np.int64), 0)
