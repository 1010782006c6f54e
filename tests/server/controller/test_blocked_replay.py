"""A restart's replay as a blocked elimination: the stored rows go in blocks,
each reduced against the kept basis by one product and then eliminated within the block
(``ReducedBasis._extended_once``), and the products are exact modulo p with as few float64 BLAS
calls as the entries allow (``modular.matmul``).

The replay must leave the state that releasing the same rows step by step leaves: the same row
space over the atoms, the same V and the same decisions. With blocks of 2 to 5 rows, a history of
5 to 30 rows crosses many blocks, so a block whose rows depend on each other or on the basis is
the common case here, not the rare one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from audit_spaces import batch_check, batch_space, kept_space, random_forms
from hypothesis import given, settings
from hypothesis import strategies as st

from petlab.server.controller import reduced_basis
from petlab.server.controller.modular import matmul, random_prime, rref
from petlab.server.controller.release_audit import Functional, ReleaseAudit

P = random_prime(np.random.default_rng(31))


def row_space(audit: ReleaseAudit) -> np.ndarray:
    """The kept basis's row space over the atoms, in the reduced form of the natural column order."""
    return rref(audit._bases[P].rows, P)[0]


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 5))
def test_a_blocked_replay_leaves_the_state_of_the_steps(seed, block):
    rng = np.random.default_rng(seed)
    n, t = int(rng.integers(15, 60)), int(rng.integers(2, 6))
    data = pd.DataFrame({"w": rng.integers(1, 4, size=n), "z": rng.integers(-2, 3, size=n) / 2})
    stepwise = ReleaseAudit(data, t, primes=(P,))
    released: list[Functional] = []
    for step in range(int(rng.integers(4, 8))):
        forms = random_forms(rng, data, int(rng.integers(1, 5)), coarse=step == 0)
        if rng.random() < 0.3 and released:  # a released row again, and a sum of two released sets
            forms.append(released[int(rng.integers(0, len(released)))])
        stepwise.record(forms)
        released += forms
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reduced_basis, "CHUNK", block)
        restarted = ReleaseAudit(data, t, primes=(P,))
        restarted.record(released)
    assert restarted.rank() == stepwise.rank()
    assert np.array_equal(row_space(restarted), row_space(stepwise))
    assert np.array_equal(kept_space(restarted, P), batch_space(restarted, P))
    assert np.array_equal(kept_space(restarted, P), kept_space(stepwise, P))
    forms = random_forms(rng, data, 2)
    assert restarted.check(forms) == batch_check(stepwise, forms, np.random.default_rng(seed))


def exact(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    return (a.astype(object).dot(b.astype(object)) % p).astype(np.int64)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 100, 128, 129, 200, 256, 4097]))
def test_the_products_are_exact_at_the_float64_limit(seed, inner):
    """Entries chosen so every float64 partial sum is as large as the plan allows: the left factor
    at (p - 1) / 2 (the largest centred residue), the right one with all-ones limbs."""
    rng = np.random.default_rng(seed)
    p = random_prime(rng)
    rows, columns = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    worst = np.full((rows, inner), (p - 1) // 2, dtype=np.int64)
    low_16 = (p - 1 - 0xFFFF) | 0xFFFF  # the largest residues whose low limbs are all ones
    low_22 = (p - 1 - 0x3FFFFF) | 0x3FFFFF
    right = rng.choice(np.array([low_16, low_22, p - 1], dtype=np.int64), size=(inner, columns))
    assert np.array_equal(matmul(worst, right, p), exact(worst, right, p))
    forms = rng.integers(0, 100, size=(rows, inner))  # a raw released form: one product
    assert np.array_equal(matmul(forms, right, p), exact(forms, right, p))
    residues = rng.integers(0, p, size=(rows, inner))
    assert np.array_equal(matmul(residues, right, p), exact(residues, right, p))
