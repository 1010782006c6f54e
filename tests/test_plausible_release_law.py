"""Plausible deniability as it runs, against the exact law of the whole release on a toy model.

The release (``synthesize``, ``petlab-synth plausible``) runs Mechanism 1 until ``count`` records
pass, at most L times, and otherwise fails (nothing written, exit status 1). Given the model, runs
are i.i.d.: a run outputs record y with probability P_D(y) (``mechanism_law`` of
``test_plausible_mechanism_law``) and passes with probability p = P(pass | D) = sum_y P_D(y). So the
release outputs the ordered records (y_1..y_c) with probability
prod_i P_D(y_i) * sum_{j=c}^{L} C(j - 1, c - 1) (1 - p)^{j - c}, and FAILED with probability
P(Binomial(L, p) < c). This test computes that law for the toy data set and every neighbour
(P(pass | D) for each), and checks the statement the release prints
(:func:`petlab.plaindata.plausible.accounting.seeds_cost`: Theorem 1 composed over the L runs) with
the exact hockey-stick divergence. The statement the project printed before issue 24 (Theorem 1
composed over the released records, the exit status not covered) is broken by the same law.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binom
from test_plausible_mechanism_law import GAMMA, MODEL, OMEGA, SEEDS, hockey_stick, mechanism_law, neighbours

from petlab.plaindata.dp.accounting import PrivacyCost
from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.plausible.accounting import seeds_cost
from petlab.plaindata.plausible.privacy_tests import theorem1
from petlab.plaindata.plausible.synthesis import (
    FittedModel,
    PlausibleConfig,
    assign_subsets,
    candidate_limit,
    synthesize,
)

K, EPS0, T = 4, 2.0, 2  # Theorem 1: eps1 = 2 + ln 3, delta1 = e^-4


def release_law(seeds: np.ndarray, count: int, limit: int) -> tuple[dict, float]:
    """The exact law of the rerun-until-count release (module docstring), and P(pass | D)."""
    trial = mechanism_law(seeds, EPS0, k=K)
    records = {y: p for y, p in trial.items() if y is not None}
    passing = sum(records.values())
    waiting = sum(math.comb(j - 1, count - 1) * (1 - passing) ** (j - count) for j in range(count, limit + 1))
    law: dict = {"FAILED": float(binom.cdf(count - 1, limit, passing))}
    for ys in itertools.product(records, repeat=count):
        law[ys] = math.prod(records[y] for y in ys) * waiting
    return law, passing


def worst_divergence(count: int, limit: int, epsilon: float) -> tuple[float, list[float]]:
    law, passing = release_law(SEEDS, count, limit)
    assert sum(law.values()) == pytest.approx(1.0)
    worst, rates = 0.0, [passing]
    for other in neighbours(SEEDS):
        other_law, other_passing = release_law(other, count, limit)
        rates.append(other_passing)
        worst = max(worst, hockey_stick(other_law, law, epsilon), hockey_stick(law, other_law, epsilon))
    return worst, rates


@pytest.mark.parametrize("count, limit", [(1, 8), (2, 3), (2, 5)])
def test_the_printed_statement_holds_for_the_release_as_it_runs(count, limit):
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0, t=T, model_delta=0.01)
    cost = seeds_cost(config, count, limit)
    assert isinstance(cost, PrivacyCost) and not cost.vacuous
    worst, rates = worst_divergence(count, limit, cost.epsilon)
    assert worst <= cost.delta
    # P(pass | D) moves with the data: what a statement conditioned on passing would depend on
    assert max(rates) / min(rates) > 5


def test_composing_over_the_released_records_only_is_broken():
    """One record asked for, 8 runs allowed: the per-record statement (eps1, delta1) of Theorem 1
    (what was printed before issue 24) does not hold for the release: the number of runs it takes,
    and whether it fails, depend on P(pass | D)."""
    per_record = theorem1(K, GAMMA, EPS0, T)
    worst, _ = worst_divergence(1, 8, per_record.epsilon)
    assert worst > 1.5 * per_record.delta


def test_the_release_samples_this_law():
    """``synthesize`` (what the CLI runs) on the toy model: FAILED and the first record's law."""
    fitted = FittedModel(MODEL, structure=None, seeds=SEEDS, parameters_budget=None)  # type: ignore[arg-type]
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0)
    law, _ = release_law(SEEDS, 1, 3)
    rng, noise = np.random.default_rng(3), SeededNoise(4)
    observed = {o: 0 for o in law}
    draws = 1500
    for _ in range(draws):
        run = synthesize(fitted, 1, config, rng, noise, max_candidates=3, batch=3)
        key = (tuple(int(v) for v in run.records[0]),) if len(run.records) else "FAILED"
        observed[key] += 1
    from scipy import stats

    keys = [o for o in law if law[o] > 0]
    expected = np.array([law[o] for o in keys]) * draws
    assert sum(observed[o] for o in law if law[o] == 0) == 0
    assert stats.chisquare([observed[o] for o in keys], expected * draws / expected.sum()).pvalue > 1e-6


def test_each_record_is_assigned_on_its_own():
    """Parallel composition needs one record's presence to change its own subset only: with the
    same random stream, the first n records of n + 1 land where they did for n (a fixed-size split
    moved some: n = 12 gave 2/4/6, n = 13 gave 3/4/6), and the assignment has the public law."""
    shares = (0.2, 0.3, 0.5)
    for n in (12, 13, 200):
        small = assign_subsets(n, shares, np.random.default_rng(n))
        large = assign_subsets(n + 1, shares, np.random.default_rng(n))
        for part, bigger in zip(small, large, strict=True):
            assert part.tolist() == bigger[bigger < n].tolist()
    subsets = np.zeros(3, dtype=int)
    for seed in range(300):
        for s, part in enumerate(assign_subsets(100, shares, np.random.default_rng(seed))):
            subsets[s] += len(part)
    from scipy import stats

    assert stats.chisquare(subsets, np.array(shares) * subsets.sum()).pvalue > 1e-6
    assert [len(p) for p in assign_subsets(0, shares, np.random.default_rng(0))] == [0, 0, 0]


def test_an_empty_seed_set_fails_the_run_without_error():
    """A subset can be empty now (any n): no seeds means every run outputs nothing."""
    fitted = FittedModel(MODEL, structure=None, seeds=SEEDS[:0], parameters_budget=None)  # type: ignore[arg-type]
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0)
    run = synthesize(fitted, 2, config, np.random.default_rng(0), SeededNoise(0))
    assert len(run.records) == 0 and run.candidates == candidate_limit(2) == 8
