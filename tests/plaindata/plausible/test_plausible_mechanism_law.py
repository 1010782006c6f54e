"""Theorem 1 (Bindschaedler et al., VLDB 2017) against the exact output law of Mechanism 1.

A toy generative model small enough to enumerate: three binary attributes in a chain 0 -> 1 -> 2,
omega = 2 (attribute 0 kept from the seed, 1 and 2 resampled). For a data set D of seeds, Mechanism
1 with Privacy Test 2 outputs record y with probability

    P_D(y) = (1 / |D|) sum_{d in D} Pr{y = M(d)} P(Lap(1 / eps0) <= c_D(y, d) - k),

c_D(y, d) the number of plausible seeds (records of D in d's partition for y), and nothing (⊥)
with the remaining probability. Both are computed here from the project's own
``seed_probabilities`` and ``count_plausible_seeds``. Theorem 1 says that for neighbours D and
D' = D + {d'} and every set Y of outcomes, P_D'(Y) <= e^eps P_D(Y) + delta (and, as a DP
statement, the same with D and D' swapped), eps = eps0 + ln(1 + gamma / t), delta =
exp(-eps0 (k - t)). The worst Y is the set of outcomes where one side exceeds e^eps times the other,
so the test computes that hockey-stick divergence exactly, over records and ⊥, for every neighbour
(each record of the domain added, each record of D removed) and every t. The sampler that runs
(``generate_and_test``) is checked to draw this law (chi-square), and the deterministic Test 1 is
shown to break the bound (so the check can fail).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.plausible.bayes_model import BayesNet, seed_probabilities
from petlab.plaindata.plausible.privacy_tests import count_plausible_seeds, theorem1
from petlab.plaindata.plausible.synthesis import FittedModel, PlausibleConfig, generate_and_test

DOMAIN = [np.array(r) for r in itertools.product([0, 1], repeat=3)]
MODEL = BayesNet(
    cardinalities=np.array([2, 2, 2]),
    discretization=tuple(np.arange(2) for _ in range(3)),
    parents=((), (0,), (1,)),
    order=(0, 1, 2),
    tables=(np.array([[0.5, 0.5]]), np.array([[0.7, 0.3], [0.2, 0.8]]), np.array([[0.9, 0.1], [0.35, 0.65]])),
)
OMEGA, GAMMA, K, EPS0 = 2, 4.0, 3, 1.0
SEEDS = np.array([[0, 0, 0], [0, 1, 1], [0, 0, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 1, 0]])


def laplace_pass(margin: float, eps0: float | None) -> float:
    """P(count >= k + Lap(1 / eps0)) with margin = count - k; Test 1 (eps0 None) is a step."""
    if eps0 is None:
        return float(margin >= 0)
    return 1 - 0.5 * math.exp(-eps0 * margin) if margin >= 0 else 0.5 * math.exp(eps0 * margin)


def mechanism_law(seeds: np.ndarray, eps0: float | None = EPS0, k: int = K) -> dict:
    """Exact output law of Mechanism 1 on ``seeds``: record tuples and None (no output)."""
    law: dict = {}
    for y in DOMAIN:
        p = seed_probabilities(MODEL, y, seeds, OMEGA)
        total = 0.0
        for d in np.flatnonzero(p > 0):
            count = count_plausible_seeds(p, int(d), GAMMA)
            total += p[d] * laplace_pass(count - k, eps0)
        law[tuple(y)] = total / len(seeds)
    law[None] = 1 - sum(law.values())
    return law


def hockey_stick(first: dict, second: dict, epsilon: float) -> float:
    """max over outcome sets Y of P_first(Y) - e^eps P_second(Y)."""
    return sum(max(0.0, first[o] - math.exp(epsilon) * second[o]) for o in first)


def neighbours(seeds: np.ndarray):
    for record in DOMAIN:
        yield np.vstack([seeds, record])
    for row in range(len(seeds)):
        yield np.delete(seeds, row, axis=0)


@pytest.mark.parametrize("t", [1, 2])
def test_theorem_1_holds_on_the_exact_law(t):
    bound = theorem1(K, GAMMA, EPS0, t)
    law = mechanism_law(SEEDS)
    assert sum(law.values()) == pytest.approx(1.0) and 0 < law[None] < 1
    worst = 0.0
    for other in neighbours(SEEDS):
        neighbour_law = mechanism_law(other)
        worst = max(worst, hockey_stick(neighbour_law, law, bound.epsilon))
        worst = max(worst, hockey_stick(law, neighbour_law, bound.epsilon))
    assert worst <= bound.delta
    # the law is not trivially within it: some neighbour moves some outcome by more than e^eps0
    ratios = [
        max(b[o] / a[o], a[o] / b[o])
        for other in neighbours(SEEDS)
        for a, b in [(law, mechanism_law(other))]
        for o in a
        if a[o] > 0 and b[o] > 0
    ]
    assert math.exp(EPS0) < max(ratios) <= math.exp(bound.epsilon)


def test_privacy_test_1_breaks_the_bound():
    """The deterministic Test 1 is not (eps, delta)-DP: a neighbour that lifts a count to k makes an
    output possible that was impossible."""
    bound = theorem1(K, GAMMA, 1.0, 1)
    law = mechanism_law(SEEDS, eps0=None)
    worst = max(hockey_stick(mechanism_law(o, eps0=None), law, bound.epsilon) for o in neighbours(SEEDS))
    assert worst > bound.delta


def test_the_sampler_that_runs_draws_this_law():
    """``generate_and_test`` (what ``petlab-synth plausible`` runs) against the exact law."""
    fitted = FittedModel(MODEL, structure=None, seeds=SEEDS, parameters_budget=None)  # type: ignore[arg-type]
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0)
    draws = 40_000
    result = generate_and_test(fitted, draws, config, np.random.default_rng(11), SeededNoise(12))
    observed: dict = {o: 0 for o in mechanism_law(SEEDS)}
    for record, passed in zip(result.records, result.passed, strict=True):
        observed[tuple(int(v) for v in record) if passed else None] += 1
    expected = mechanism_law(SEEDS)
    keys = [o for o in expected if expected[o] > 0]
    assert sum(observed[o] for o in expected if expected[o] == 0) == 0
    f_exp = np.array([expected[o] for o in keys]) * draws
    assert stats.chisquare([observed[o] for o in keys], f_exp * draws / f_exp.sum()).pvalue > 1e-6
