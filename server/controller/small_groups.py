"""Exact search for a group of fewer than t records whose count or sum a space of released
combinations determines (issue 22; the release audit's last step, ``release_audit``).

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
the root; structured rows (a difference of two atoms, a swapped pair) leave small L_k. Measured on
the 5,000-record ACS sample with hundreds of random analyses: d up to 113 over 4,850 atoms in
about one second. The number of nodes and their total cost are capped (``budget``, ``work``):
past either the search raises :class:`SearchBudget` and the audit refuses, so the caps cost
utility, never privacy.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from petlab.errors import PetlabError
from petlab.server.controller.audit_clock import tick
from petlab.server.controller.modular import left_null_space, matmul, rref

ENUMERATE = 10


class SearchBudget(PetlabError):
    """The search needed more than its budget of nodes: no answer either way."""


def find_group(
    rows: np.ndarray,
    sizes: np.ndarray,
    t: int,
    p: int,
    budget: int = 20_000,
    work: float = 2e9,
    spent: list | None = None,
) -> np.ndarray | None:
    """Columns of a 0/1 vector of the row space of ``rows`` (mod p) whose ``sizes`` total 1 to
    t - 1, or None if there is none. Raises :class:`SearchBudget` past ``budget`` nodes or ``work``
    (the sum over nodes of d^2 w, their reductions' cost). ``spent``: a list [nodes, work] that the
    search's own nodes and work are added to (the caller's account)."""
    if t < 2:
        return None
    counter = [0, 0.0, work]
    try:
        return _find(rows, sizes, t, p, budget, counter)
    finally:
        if spent is not None:
            spent[0] += counter[0]
            spent[1] += counter[1]


def _find(rows, sizes, t, p, budget, counter) -> np.ndarray | None:
    sizes = np.asarray(sizes, dtype=np.int64)
    for block_rows, block_columns in blocks(np.asarray(rows, dtype=np.int64) % p):
        found = _search(block_rows, sizes[block_columns], t, p, counter, budget)
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


def _search(rows: np.ndarray, sizes: np.ndarray, t: int, p: int, counter: list, budget: int):
    counter[0] += 1
    counter[1] += float(len(rows)) ** 2 * rows.shape[1]
    tick()
    if counter[0] > budget or counter[1] > counter[2]:
        raise SearchBudget
    keep = np.flatnonzero(rows.any(axis=0))  # a column where all of V vanishes is never in z
    basis, pivots = rref(rows[:, keep], p)
    sizes = sizes[keep]
    if not len(basis):
        return None
    if len(basis) <= ENUMERATE:
        found = _enumerate(basis, pivots, sizes, t, p, counter, budget)
        return None if found is None else keep[found]
    is_pivot = np.zeros(basis.shape[1], dtype=bool)
    is_pivot[pivots] = True
    free = np.flatnonzero(~is_pivot)
    if len(free) < t - 1:  # too few columns to split: T may cover them all
        found = _enumerate(basis, pivots, sizes, t, p, counter, budget)
        return None if found is None else keep[found]
    for k in range(t - 1):
        null = left_null_space(basis[:, free[k :: t - 1]], p)
        if not len(null):
            continue  # only z = 0 vanishes on this group
        for sub_rows, sub_columns in blocks(matmul(null, basis, p)):
            found = _search(sub_rows, sizes[sub_columns], t, p, counter, budget)
            if found is not None:
                return keep[sub_columns[found]]
    return None


def _enumerate(basis, pivots, sizes, t, p, counter, budget):
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
            if counter[0] > budget:
                raise SearchBudget
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
