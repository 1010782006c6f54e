"""The release audit's state, rebuilt and read: V (the combinations of released rows that vanish on
every large atom) rebuilt from the whole history as the batch audit does it, the same V read off the
kept basis, the batch audit itself (:func:`batch_check`, the reference the kept-basis audit is
tested against), and random released forms whose atoms split between steps. Imported by the
release-audit tests of this room (pytest's prepend import mode puts this folder on ``sys.path``)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd

from petlab.server.controller.audit_clock import tick
from petlab.server.controller.modular import left_null_space, matmul, rref, times_bits
from petlab.server.controller.release_audit import Finding, Functional, ReleaseAudit

SUPPORT_SAMPLES = 3
SPAN_MARGIN = 8


def batch_check(
    audit: ReleaseAudit, functionals: list[Functional], rng: np.random.Generator
) -> Finding | None:
    """The audit rebuilt from the whole history, with no kept state: a left null space Y of all
    released rows on the large atoms (an m x m matrix), three random elements of V for its support
    (an atom missed with probability p^-3) and D random combinations for its basis (incomplete with
    probability below 2 p^-8), then the same exact search. Its reduced form on the support is the
    kept basis's V (a reduced form is unique), so both audits give the search the same input: the
    reference :meth:`ReleaseAudit.check` (the kept bases, the split certificate, the search of the
    changed blocks) is tested against."""
    atoms = audit._refined(functionals)
    sizes = np.bincount(atoms)
    representatives = np.empty(len(sizes), dtype=np.int64)
    representatives[atoms[::-1]] = np.arange(len(atoms))[::-1]  # each atom's first record
    small = np.flatnonzero(sizes < audit.threshold)
    if not len(small):
        return None
    bits = audit.released_bits()
    if functionals:
        bits = np.concatenate([bits, np.stack([f.members for f in functionals])])
    weights = audit._weights + [f.weight for f in functionals]
    large = np.flatnonzero(sizes >= audit.threshold)
    for p in audit.primes:
        on_large = audit._over_atoms(bits, weights, representatives[large], p)
        combinations = left_null_space(on_large, p)  # Y: zero on every large atom
        if not len(combinations):
            continue
        probes = matmul(rng.integers(0, p, size=(SUPPORT_SAMPLES, len(combinations))), combinations, p)
        values = _times(audit, probes, bits, weights, representatives[small], p)
        support = small[(values != 0).any(axis=0)]
        if not len(support):
            continue
        basis = np.zeros((0, len(support)), dtype=np.int64)
        depth, drawn = 32, 0
        while True:
            exact = depth >= len(combinations)
            if exact:  # every combination: no sampling
                mixing = combinations
            else:  # depth uniform random combinations in all: the ones not drawn yet
                draw = rng.integers(0, p, size=(depth - drawn, len(combinations)))
                mixing, drawn = matmul(draw, combinations, p), depth
            fresh = _times(audit, mixing, bits, weights, representatives[support], p)
            basis, _ = rref(np.concatenate([basis, fresh]), p)
            if exact or len(basis) <= depth - SPAN_MARGIN:
                break
            depth *= 2
        finding = audit._search(basis, sizes, support, p)
        if finding is not None:
            return finding
    return None


def _times(audit: ReleaseAudit, coefficients, bits, weights, records, p) -> np.ndarray:
    """coefficients (k x rows) times M over the atoms represented by ``records``, mod p: the query
    sets by one exact product with their bits, the weighted rows by one exact product per weighing
    column (its rows' bits times the column's residues), in blocks of records."""
    by_weight: dict[str | None, list[int]] = {}
    for row, weight in enumerate(weights):
        by_weight.setdefault(weight, []).append(row)
    out = np.zeros((len(coefficients), len(records)), dtype=np.int64)
    for weight, rows in by_weight.items():
        chosen, part = bits[rows], coefficients[:, rows]
        for start in range(0, len(records), 8192):
            tick()
            block = records[start : start + 8192]
            gathered = audit._gather(chosen, block)
            if weight is None:
                product = times_bits(part, gathered, p)
            else:
                product = matmul(part, gathered * audit._weight_residues(weight, p)[block][None, :], p)
            out[:, start : start + 8192] = (out[:, start : start + 8192] + product) % p
    return out


def batch_space(audit: ReleaseAudit, p: int) -> np.ndarray:
    """V in reduced form over the small atoms, rebuilt from every released row (the reference)."""
    sizes = np.bincount(audit._atoms)
    representatives = np.empty(len(sizes), dtype=np.int64)
    representatives[audit._atoms[::-1]] = np.arange(audit.n_records)[::-1]
    bits, weights = audit.released_bits(), audit._weights
    matrix = audit._over_atoms(bits, weights, representatives, p)
    large = sizes >= audit.threshold
    combinations = left_null_space(matrix[:, large], p)
    if not len(combinations):
        return np.zeros((0, int((~large).sum())), dtype=np.int64)
    return rref(matmul(combinations, matrix[:, ~large], p), p)[0]


def kept_space(audit: ReleaseAudit, p: int) -> np.ndarray:
    """V read off the kept basis modulo ``p``, after checking the basis's form (``reduced_basis``)."""
    basis = audit._bases[p]
    vanishing = basis.vanishing_on_large()
    assert not vanishing[:, basis.large].any()  # B_2 is zero on every large atom
    assert np.array_equal(basis.rows[:, basis.pivots], np.eye(basis.rank, dtype=np.int64))
    return rref(vanishing[:, ~basis.large], p)[0]


def random_forms(
    rng: np.random.Generator, data: pd.DataFrame, k: int, coarse: bool = False
) -> list[Functional]:
    """k random forms: sets, blocks of consecutive records, sums. ``coarse``: sums over large sets,
    which make large atoms that are not pivots, so that later splits leave rows without a large
    pivot (the hard case of ``reduced_basis``)."""
    n = len(data)
    out = []
    for _ in range(k):
        if coarse:
            members = rng.random(n) < 0.9
        elif rng.random() < 0.3:  # a block of consecutive records: nested and overlapping sets
            low = int(rng.integers(0, n))
            members = np.zeros(n, dtype=bool)
            members[low : low + int(rng.integers(1, n))] = True
        else:
            members = rng.random(n) < rng.uniform(0.1, 0.9)
        weights = ["w", "z", "w*z"] if coarse else [None, None, None, "w", "z", "w*z"]
        out.append(Functional.of(members, rng.choice(np.array(weights, dtype=object))))
    return out


def null_space(rows: list[list[int]] | list[list[Fraction]], width: int) -> list[list[Fraction]]:
    """A basis of {x : M x = 0} over the rationals (M's rows ``rows``), by reduced row echelon form."""
    m = [[Fraction(v) for v in row] for row in rows]
    pivots: list[int] = []
    r = 0
    for c in range(width):
        p = next((i for i in range(r, len(m)) if m[i][c]), None)
        if p is None:
            continue
        m[r], m[p] = m[p], m[r]
        m[r] = [v / m[r][c] for v in m[r]]
        for i in range(len(m)):
            if i != r and m[i][c]:
                m[i] = [a - m[i][c] * b for a, b in zip(m[i], m[r], strict=True)]
        pivots.append(c)
        r += 1
    basis = []
    for free in (c for c in range(width) if c not in pivots):
        x = [Fraction(0)] * width
        x[free] = Fraction(1)
        for i, c in enumerate(pivots):
            x[c] = -m[i][free]
        basis.append(x)
    return basis
