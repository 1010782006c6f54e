"""OnTheMap's privacy calculus against the ICDE 2008 paper's worked numbers, and Theorem 4.1 by
exhaustive enumeration on tiny domains."""

import itertools
import math

import numpy as np
import pytest

from plaindata.onthemap_privacy import (
    dirichlet_multinomial_logpmf,
    dp_alpha,
    log_rho,
    pdp_alpha,
    pdp_threshold,
    shrunk_epsilon,
    worst_case_ratio,
)


def test_theorem_4_1_worked_examples():
    assert dp_alpha(10**6, 7) == pytest.approx(912.7, abs=0.1)  # the paper prints 914
    assert dp_alpha(20, 7) == pytest.approx(0.018, abs=0.0005)
    assert worst_case_ratio(20, dp_alpha(20, 7)) == pytest.approx(math.exp(7))


def test_section_vi_shrunk_epsilon():
    assert shrunk_epsilon(4.6, 0.0378, 1) == pytest.approx(8.6, abs=0.05)


def compositions(total: int, parts: int):
    for cut in itertools.combinations(range(total + parts - 1), parts - 1):
        edges = (-1, *cut, total + parts - 1)
        yield np.array([edges[i + 1] - edges[i] - 1 for i in range(parts)])


def exact_max_ratio(n: int, m: int, k: int, alpha: np.ndarray) -> float:
    """Max over neighbouring inputs (one worker moved between origin blocks) and all outputs."""
    best = 0.0
    for counts in compositions(n, k):
        for i, j in itertools.permutations(range(k), 2):
            if counts[i] == 0:
                continue
            moved = counts.copy()
            moved[i] -= 1
            moved[j] += 1
            for output in compositions(m, k):
                ratio = math.exp(
                    dirichlet_multinomial_logpmf(output, counts, alpha)
                    - dirichlet_multinomial_logpmf(output, moved, alpha)
                )
                best = max(best, ratio)
    return best


@pytest.mark.parametrize("n, m, k", [(2, 2, 2), (3, 3, 3), (3, 4, 2)])
def test_theorem_4_1_by_enumeration(n, m, k):
    eps = 1.5
    alpha = np.full(k, dp_alpha(m, eps))
    observed = exact_max_ratio(n, m, k, alpha)
    assert observed == pytest.approx(worst_case_ratio(m, alpha.min()), rel=1e-9)
    assert observed <= math.exp(eps) * (1 + 1e-9)
    assert exact_max_ratio(n, m, k, alpha * 0.8) > math.exp(eps)  # below Theorem 4.1's alpha: violated


def test_rho_is_a_beta_binomial_maximum():
    """With c tiny f(x) = 0 wherever min(m, c...) rounds down: rho reduces to P(no success) terms."""
    n, m, a1, a2 = 6, 6, 0.5, 4.0
    value = log_rho(n, m, a1, a2, 1e-12)
    x = np.arange(n)
    direct = max(
        math.lgamma(n - xi + m + a2)
        + math.lgamma(n + a1 + a2)
        - math.lgamma(n + m + a1 + a2)
        - math.lgamma(n - xi + a2)
        + math.lgamma(xi + a1)
        - math.lgamma(xi + a1)
        for xi in x
    )
    assert value == pytest.approx(direct, abs=1e-6)


def test_pdp_alpha_is_the_smallest_that_satisfies_theorem_4_4():
    n, eps, delta, k = 15, 4.6, 1e-5, 233726
    alpha = pdp_alpha(n, eps, delta, k)
    target = math.log(pdp_threshold(delta, eps, k))
    c = math.expm1(eps)
    assert log_rho(n, n, alpha, (k - 1) * alpha, c) <= target
    assert log_rho(n, n, alpha * 0.999, (k - 1) * alpha * 0.999, c) > target
    assert 0.001 < alpha < 0.1  # "the alpha_i can be very small" (Section IV-C)
    assert pdp_alpha(n, eps, 1e-3, k) < alpha < pdp_alpha(n, eps, 1e-7, k)


def test_bad_parameters():
    with pytest.raises(ValueError, match="ln 3"):
        pdp_threshold(1e-5, 1.0, 10)
    with pytest.raises(ValueError):
        dp_alpha(0, 1.0)
    with pytest.raises(ValueError):
        shrunk_epsilon(1.0, 0.0, 1)
