"""The release audit's state, rebuilt and read (issue 30, point 3): V (the combinations of released
rows that vanish on every large atom) rebuilt from the whole history as the batch audit does it, the
same V read off the kept basis, and random released forms whose atoms split between steps. Imported
by the incremental-audit tests of this room (pytest's prepend import mode puts this folder on
``sys.path``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from petlab.server.controller.modular import left_null_space, matmul, rref
from petlab.server.controller.release_audit import Functional, ReleaseAudit


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
