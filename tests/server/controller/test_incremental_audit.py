"""The incremental release audit (issue 30, point 3) against the batch audit it replaced.

Random histories are released step by step, so atoms split and large atoms become small between
steps. After each step the incremental decision on the next forms must equal the batch audit's
(``ReleaseAudit.check_batch``, which rebuilds everything from the released rows), the kept basis
must span what the batch computes (V: the combinations of released rows that vanish on every large
atom), and a restart that replays the rows at once must keep the same state.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from petlab.server.controller.modular import left_null_space, matmul, random_prime, rref
from petlab.server.controller.release_audit import Functional, ReleaseAudit

P = random_prime(np.random.default_rng(30))


def batch_space(audit: ReleaseAudit) -> np.ndarray:
    """V in reduced form over the small atoms, rebuilt from every released row (the reference)."""
    sizes = np.bincount(audit._atoms)
    representatives = np.empty(len(sizes), dtype=np.int64)
    representatives[audit._atoms[::-1]] = np.arange(audit.n_records)[::-1]
    bits, weights = audit.released_bits(), audit._weights
    matrix = audit._over_atoms(bits, weights, representatives, P)
    large = sizes >= audit.threshold
    combinations = left_null_space(matrix[:, large], P)
    if not len(combinations):
        return np.zeros((0, int((~large).sum())), dtype=np.int64)
    return rref(matmul(combinations, matrix[:, ~large], P), P)[0]


def kept_space(audit: ReleaseAudit) -> np.ndarray:
    basis = audit._bases[P]
    vanishing = basis.vanishing_on_large()
    assert not vanishing[:, basis.large].any()  # B_2 is zero on every large atom
    assert np.array_equal(basis.rows[:, basis.pivots], np.eye(basis.rank, dtype=np.int64))
    return rref(vanishing[:, ~basis.large], P)[0]


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


@settings(max_examples=25)
@given(st.integers(0, 2**32 - 1))
def test_the_incremental_audit_decides_as_the_batch_audit(seed):
    rng = np.random.default_rng(seed)
    n, t = int(rng.integers(12, 60)), int(rng.integers(2, 7))
    data = pd.DataFrame({"w": rng.integers(1, 4, size=n), "z": rng.integers(-2, 3, size=n) / 2})
    audit = ReleaseAudit(data, t, primes=(P,), rng=np.random.default_rng(seed))
    released: list[Functional] = []
    for step in range(int(rng.integers(2, 7))):
        forms = random_forms(rng, data, int(rng.integers(1, 4)), coarse=step == 0 and rng.random() < 0.7)
        incremental, batch = audit.check(forms), audit.check_batch(forms)
        assert incremental == batch
        if incremental is None or rng.random() < 0.5:  # a refused step is sometimes recorded anyway
            audit.record(forms)
            released += forms
            assert np.array_equal(kept_space(audit), batch_space(audit))
    restarted = ReleaseAudit(data, t, primes=(P,), rng=np.random.default_rng(seed))
    restarted.record(released)
    assert restarted.rank() == audit.rank()
    assert np.array_equal(kept_space(restarted), kept_space(audit))
    forms = random_forms(rng, data, 2)
    assert restarted.check(forms) == audit.check_batch(forms)
