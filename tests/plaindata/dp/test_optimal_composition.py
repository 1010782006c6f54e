"""The accountant (dp_accounting's PLD, :mod:`petlab.plaindata.dp.composition`) against the exact
optimal composition of Kairouz, Oh and Viswanath (ICML 2015, Theorem 3.3), written out here: K
runs of an (eps, delta)-DP mechanism are (eps', 1 - (1 - delta)^K (1 - d(eps')))-DP and no better,
with d(eps') = sum_j C(K, j) max(0, e^{(K - j) eps} - e^{eps'} e^{j eps}) / (1 + e^eps)^K."""

import math

import pytest

from petlab.plaindata.dp.composition import compose, optimal_composition, sequential
from petlab.plaindata.dp.privacy_cost import PrivacyCost


def kov_delta(epsilon: float, count: int, delta: float, epsilon_total: float) -> float:
    log_norm = count * math.log1p(math.exp(epsilon))
    d = sum(
        math.exp(math.log(math.comb(count, j)) - log_norm)
        * max(0.0, math.exp((count - j) * epsilon) - math.exp(epsilon_total + j * epsilon))
        for j in range(count + 1)
    )
    return 1 - (1 - delta) ** count * (1 - d)


@pytest.mark.parametrize(
    "epsilon, count, delta, slack",
    [(0.1, 50, 0.0, 1e-6), (1.0, 30, 0.0, 1e-5), (0.5, 40, 1e-8, 1e-6), (1.129, 100, 7.6e-10, 2**-30)],
)
def test_the_accountant_is_the_optimal_composition(epsilon, count, delta, slack):
    total = optimal_composition(epsilon, count, slack, delta)
    assert total.delta == pytest.approx(count * delta + slack)
    assert kov_delta(epsilon, count, delta, total.epsilon) <= total.delta * (1 + 1e-9)  # it holds
    assert kov_delta(epsilon, count, delta, total.epsilon * (1 - 0.005)) > total.delta  # tight: 0.5%
    assert total.epsilon < count * epsilon


def test_unequal_mechanisms_compose_within_the_basic_sum():
    parts = [PrivacyCost(0.2, 1e-9, "a"), PrivacyCost(0.05, 0.0, "b")] + [PrivacyCost(0.05, 0.0, "c")] * 30
    total = compose(parts, 1e-6)
    assert total.epsilon < sequential(parts).epsilon and total.delta == pytest.approx(1e-9 + 1e-6)
    # the 31 equal parts alone are the KOV figure; adding the first can only cost more
    alone = optimal_composition(0.05, 31, 1e-6)
    assert alone.epsilon < total.epsilon <= alone.epsilon + 0.2


def test_the_basic_sum_when_it_is_smaller():
    """Few pure-DP runs at a small delta: the basic sum (at delta 0) is below what the accountant
    finds, and is returned."""
    total = optimal_composition(1.0, 3, 1e-9)
    assert (total.epsilon, total.delta) == (3.0, 0.0) and "sequential" in total.covered_by
