"""Sparse Algorithm 1 has exactly the dense algorithm's distribution, and its cost does not grow
with the origin domain."""

import itertools
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from petlab.plaindata.onthemap.algorithm1 import synthesize_destination, synthesize_destination_dense

ALPHA_TEST = 1e-6


def test_sparse_equals_dense_in_distribution():
    k, m, alpha = 4, 3, 0.7
    counts = np.array([2, 0, 1, 0])
    origins = np.flatnonzero(counts)
    draws = 30000
    sparse_rng, dense_rng = np.random.default_rng(1), np.random.default_rng(2)
    sparse = Counter()
    for _ in range(draws):
        out = synthesize_destination(origins, counts[origins], k, alpha, m, sparse_rng)
        sparse[tuple(out.get(i, 0) for i in range(k))] += 1
    dense = Counter(tuple(synthesize_destination_dense(counts, alpha, m, dense_rng)) for _ in range(draws))
    outcomes = sorted(set(sparse) | set(dense))
    assert len(outcomes) == len(list(itertools.combinations_with_replacement(range(k), m)))
    table = np.array([[sparse[o] for o in outcomes], [dense[o] for o in outcomes]])
    assert stats.chi2_contingency(table).pvalue > ALPHA_TEST
    # and it has the power to see a wrong alpha
    wrong_rng = np.random.default_rng(3)
    wrong = Counter(tuple(synthesize_destination_dense(counts, 1.4, m, wrong_rng)) for _ in range(draws))
    table = np.array([[sparse[o] for o in outcomes], [wrong[o] for o in outcomes]])
    assert stats.chi2_contingency(table).pvalue < ALPHA_TEST


def test_output_is_well_formed():
    rng = np.random.default_rng(0)
    out = synthesize_destination(np.array([5, 9]), np.array([10, 3]), 200_000, 0.05, 13, rng)
    assert sum(out.values()) == 13
    assert all(0 <= block < 200_000 and count > 0 for block, count in out.items())


def test_cost_does_not_depend_on_the_origin_domain():
    """Without a timer: a domain of 10^12 origin blocks, which no O(k) draw could even allocate,
    costs nothing more than a small one."""
    rng = np.random.default_rng(0)
    out = synthesize_destination(np.array([3, 8]), np.array([4, 2]), 10**12, 0.01, 25, rng)
    assert sum(out.values()) == 25 and max(out) < 10**12


def test_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="distinct"):
        synthesize_destination(np.array([1, 1]), np.array([1, 2]), 5, 1.0, 3, rng)
    with pytest.raises(ValueError, match="lie in"):
        synthesize_destination(np.array([7]), np.array([1]), 5, 1.0, 3, rng)
    with pytest.raises(ValueError, match="alpha"):
        synthesize_destination(np.array([1]), np.array([1]), 5, 0.0, 3, rng)
