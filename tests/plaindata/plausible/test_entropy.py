"""Equation 9 (entropy sensitivity, derived in plaindata/plausible/entropy.py) against every small histogram,
and the composition arithmetic by hand."""

import math
from itertools import product

import numpy as np
import pytest

from petlab.plaindata.dp.composition import advanced_composition, optimal_composition, per_query_epsilon
from petlab.plaindata.plausible.entropy import (
    binary_entropy,
    count_lower_bound,
    entropy,
    entropy_sensitivity,
    histogram_entropy,
)


def histograms(n: int, values: int):
    for counts in product(range(n + 1), repeat=values):
        if sum(counts) == n:
            yield np.array(counts)


@pytest.mark.parametrize("n", range(1, 11))
def test_add_remove_sensitivity_is_exact(n):
    worst = 0.0
    for h in histograms(n, 4):
        for j in range(4):
            bigger = h.copy()
            bigger[j] += 1
            worst = max(worst, abs(histogram_entropy(bigger) - histogram_entropy(h)))
    assert worst == pytest.approx(binary_entropy(1 / (n + 1)), abs=1e-12)
    # a data set of n + 1 records, against both neighbours, is covered by the bound used
    assert worst <= entropy_sensitivity(n + 1) + 1e-12


@pytest.mark.parametrize("n", range(2, 11))
def test_substitution_sensitivity_is_exact(n):
    worst = 0.0
    for h in histograms(n, 4):
        for i, j in product(range(4), repeat=2):
            if i != j and h[i] > 0:
                moved = h.copy()
                moved[i] -= 1
                moved[j] += 1
                worst = max(worst, abs(histogram_entropy(moved) - histogram_entropy(h)))
    assert worst == pytest.approx(entropy_sensitivity(n), abs=1e-12)
    assert entropy_sensitivity(n) <= (1 + math.log(n)) / n


def test_entropy_by_hand():
    assert entropy(np.array([0, 0, 1, 1])) == pytest.approx(math.log(2))
    assert entropy(np.array([[0, 0], [0, 1], [1, 0], [1, 1]])) == pytest.approx(math.log(4))
    assert entropy(np.array([3, 3, 3])) == pytest.approx(0.0, abs=1e-12)


def test_count_lower_bound_fails_with_probability_delta():
    rng = np.random.default_rng(5)
    eps, delta, n = 0.5, 0.01, 1000
    noisy = n + rng.laplace(0, 1 / eps, 200_000)
    failures = np.mean([count_lower_bound(x, eps, delta) > n for x in noisy[:20000]])
    assert abs(failures - delta) < 4 * math.sqrt(delta / 20000)


def test_composition_by_hand():
    # Dwork-Roth 3.20: sqrt(2 k ln(1/d')) e + k e (e^e - 1), kept for the old-vs-new comparison
    total = advanced_composition(0.01, 100, 1e-6)
    assert total.epsilon == pytest.approx(
        math.sqrt(200 * math.log(1e6)) * 0.01 + 100 * 0.01 * math.expm1(0.01)
    )
    assert total.delta == pytest.approx(1e-6)
    eps = per_query_epsilon(1.0, 100, 1e-6)
    assert optimal_composition(eps, 100, 1e-6).epsilon <= 1.0
    assert optimal_composition(eps * 1.001, 100, 1e-6).epsilon > 1.0  # the largest, to 1e-4
    assert eps > per_query_epsilon_advanced(1.0, 100, 1e-6) > 1.0 / 100  # optimal beats advanced
    assert per_query_epsilon(1.0, 3, 1e-6) >= 1 / 3  # and never below basic


def per_query_epsilon_advanced(total: float, count: int, delta_prime: float) -> float:
    """The per-query eps advanced composition allows (the best of basic and advanced), by bisection."""
    low, high = 0.0, total
    for _ in range(100):
        middle = (low + high) / 2
        within = advanced_composition(middle, count, delta_prime).epsilon <= total
        low, high = (middle, high) if within else (low, middle)
    return low
