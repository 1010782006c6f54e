"""Privacy Tests 1 and 2 against brute force and the Laplace tail; Theorem 1 by hand."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.plausible.privacy_tests import (
    count_plausible_seeds,
    partitions,
    privacy_test_1,
    privacy_test_2,
    theorem1,
)


def brute_force_count(p: list[float], seed: int, gamma: float) -> int:
    """Definition-level count: find i by walking the geometric ranges, then test every record."""
    i = 0
    while not (gamma ** -(i + 1) < p[seed] <= gamma**-i):
        i += 1
    return sum(1 for q in p if gamma ** -(i + 1) < q <= gamma**-i)


@settings(max_examples=200)
@given(
    st.lists(st.floats(1e-9, 1.0), min_size=1, max_size=40),
    st.floats(1.5, 8.0),
    st.integers(1, 10),
    st.data(),
)
def test_test_1_passes_exactly_when_brute_force_count_reaches_k(p, gamma, k, data):
    seed = data.draw(st.integers(0, len(p) - 1))
    count = count_plausible_seeds(np.array(p), seed, gamma)
    assert count == brute_force_count(p, seed, gamma)
    assert privacy_test_1(count, k) == (brute_force_count(p, seed, gamma) >= k)


def test_partition_boundaries_and_zero_probability():
    gamma = 4.0
    assert partitions(np.array([1.0, 0.25, 0.2, 0.0625, 0.06, 0.0]), gamma).tolist() == [0, 1, 1, 2, 2, -1]
    with pytest.raises(ValueError, match="probability 0"):
        count_plausible_seeds(np.array([0.5, 0.0]), 1, gamma)


def test_early_stopping():
    p = np.full(1000, 0.3)
    assert count_plausible_seeds(p, 0, 4.0) == 1000
    assert count_plausible_seeds(p, 0, 4.0, max_plausible=60) == 60
    assert count_plausible_seeds(p, 0, 4.0, max_check_plausible=100, rng=np.random.default_rng(0)) == 100


@pytest.mark.parametrize("count, k, eps0", [(50, 50, 1.0), (47, 50, 1.0), (53, 50, 0.5)])
def test_test_2_pass_rate_is_the_laplace_tail(count, k, eps0):
    trials = 20000
    noise = SeededNoise(count)
    passes = sum(privacy_test_2(count, k, eps0, noise) for _ in range(trials))
    expected = stats.laplace(loc=k, scale=1 / eps0).cdf(count)
    assert stats.binomtest(passes, trials, expected).pvalue > 1e-6


def test_theorem_1_by_hand():
    result = theorem1(k=50, gamma=4.0, eps0=1.0, t=25)
    assert result.epsilon == pytest.approx(1 + math.log(1.16))  # 1.1484
    assert result.delta == pytest.approx(math.exp(-25))  # 1.39e-11
    result = theorem1(k=10, gamma=2.0, eps0=0.5, t=1)
    assert result.epsilon == pytest.approx(0.5 + math.log(3))
    assert result.delta == pytest.approx(math.exp(-4.5))
    with pytest.raises(ValueError):
        theorem1(k=10, gamma=2.0, eps0=0.5, t=10)
