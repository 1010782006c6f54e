"""Plausible deniability as it runs: every observable output of the release, enumerated exactly
on a toy model, against every figure ``petlab-synth plausible`` prints (issue 31).

The release (``synthesize``, ``petlab-synth plausible``) runs Mechanism 1 until ``count`` records
pass, at most L times, and otherwise fails (nothing written, exit status 1). Given the model, runs
are i.i.d.: a run outputs record y with probability P_D(y) (``mechanism_law`` of
``test_plausible_mechanism_law``, from the project's own seed probabilities and plausible-seed
counts) and passes with probability p = sum_y P_D(y). So the release outputs the ordered records
(y_1..y_c) with probability prod_i P_D(y_i) * sum_{j=c}^{L} C(j - 1, c - 1) (1 - p)^{j - c}, and
FAILED with probability P(Binomial(L, p) < c).

Every DP figure of the printed statement (:func:`petlab.plaindata.plausible.statement.report_lines`,
what the command prints) is checked against the exact law it claims to cover: a figure "for sets of
records" against one run's law on sets of records (Theorem 1); the model's own figure is checked
against the accountant in ``test_printed_figures``; any other DP figure claims the release and is
checked against the whole law, FAILED included. The issue's counterexample (n identical seeds, a
neighbour adds one record that shares no kept attribute) breaks every whole-release figure the
project printed before (Theorem 1 composed over the L runs), so this test fails on that code.
"""

from __future__ import annotations

import inspect
import itertools
import math
import re

import numpy as np
import pytest
from scipy import stats
from scipy.stats import binom
from test_plausible_mechanism_law import DOMAIN, GAMMA, MODEL, OMEGA, SEEDS, hockey_stick, mechanism_law

from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.plausible import statement
from petlab.plaindata.plausible.bayes_structure import Structure
from petlab.plaindata.plausible.privacy_tests import theorem1
from petlab.plaindata.plausible.synthesis import (
    FittedModel,
    PlausibleConfig,
    assign_subsets,
    candidate_limit,
    generate_and_test,
    synthesize,
)

K, EPS0, T = 4, 2.0, 2  # Theorem 1: eps1 = 2 + ln 3, delta1 = e^-4
FIGURE = re.compile(
    r"^\s*(?P<what>.*): \(epsilon = (?P<eps>[0-9.e+-]+)(?:, delta = (?P<delta>[0-9.e+-]+))?\)-DP"
)


def release_law(seeds: np.ndarray, count: int, limit: int, k: int = K, eps0: float = EPS0) -> dict:
    """The exact law of every observable output of the release (module docstring)."""
    trial = mechanism_law(seeds, eps0, k=k)
    records = {y: p for y, p in trial.items() if y is not None}
    passing = sum(records.values())
    waiting = sum(math.comb(j - 1, count - 1) * (1 - passing) ** (j - count) for j in range(count, limit + 1))
    law: dict = {"FAILED": float(binom.cdf(count - 1, limit, passing))}
    for ys in itertools.product(records, repeat=count):
        law[ys] = math.prod(records[y] for y in ys) * waiting
    return law


def records_only(law: dict) -> dict:
    return {o: p for o, p in law.items() if o is not None}


def divergence(first: dict, second: dict, epsilon: float) -> float:
    """The DP delta at epsilon, both directions."""
    return max(hockey_stick(first, second, epsilon), hockey_stick(second, first, epsilon))


def printed(config: PlausibleConfig, count: int, limit: int) -> list[tuple[str, float, float]]:
    """The DP figures of the statement the command prints for this configuration."""
    fitted = FittedModel(MODEL, Structure(MODEL.parents, MODEL.order, None, 0.0, 0), SEEDS, None)
    arguments = len(inspect.signature(statement.report_lines).parameters)
    lines = statement.report_lines(*(fitted, config, count, limit)[:arguments])
    out = []
    for line in lines:
        match = FIGURE.match(line)
        if match:
            out.append((match["what"], float(match["eps"]), float(match["delta"] or 0)))
    return out


def counterexample(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n identical seeds, and the same plus one record sharing no kept attribute (attribute 0)."""
    base = np.zeros((n, 3), dtype=np.int64)
    return base, np.vstack([base, [1, 1, 1]])


def random_neighbours(rng: np.random.Generator, pairs: int):
    for _ in range(pairs):
        seeds = np.array([DOMAIN[i] for i in rng.integers(len(DOMAIN), size=int(rng.integers(3, 9)))])
        added = np.vstack([seeds, DOMAIN[int(rng.integers(len(DOMAIN)))]])
        yield seeds, added


def check_statement(config: PlausibleConfig, pairs, count: int, limit: int) -> None:
    figures = printed(config, count, limit)
    assert figures, "the statement prints Theorem 1's figure"
    for what, epsilon, delta in figures:
        if "model alone" in what:
            continue  # the model's DP: test_printed_figures checks it against the accountant
        for small, large in pairs:
            if "for sets of records" in what:
                first = records_only(mechanism_law(small, config.eps0, k=config.k))
                second = records_only(mechanism_law(large, config.eps0, k=config.k))
            else:  # a figure for the release: every observable output, FAILED included
                first = release_law(small, count, limit, config.k, config.eps0)
                second = release_law(large, count, limit, config.k, config.eps0)
            assert divergence(first, second, epsilon) <= delta * (1 + 1e-9) + 1e-15, what


@pytest.mark.parametrize("count, limit", [(1, 1), (2, 2), (2, 5)])
def test_every_printed_figure_holds_on_the_counterexample(count, limit):
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0, t=T, model_delta=0.01)
    check_statement(config, [counterexample(n) for n in (6, 10)], count, limit)


def test_every_printed_figure_holds_on_the_issues_counterexample_at_the_defaults():
    """k = 50, eps0 = 1, t = 29 (the command's defaults), n = 60 identical seeds."""
    config = PlausibleConfig(k=50, gamma=GAMMA, omega=OMEGA, eps0=1.0)
    check_statement(config, [counterexample(60)], 1, 1)


def test_every_printed_figure_holds_on_random_neighbours():
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0, t=T, model_delta=0.01)
    check_statement(config, list(random_neighbours(np.random.default_rng(31), 12)), 2, 3)


def test_no_composed_figure_covers_the_failed_exit():
    """Why nothing is composed (plaindata/plausible/statement.py, 3.): on the counterexample the
    failed exit alone breaks Theorem 1 composed over the L runs (the statement printed before
    issue 31) when as many records are asked for as runs allowed, and at the defaults by a factor
    of millions; the law conditioned on passing (no failure) breaks any figure with delta 1/2."""
    per_run = theorem1(K, GAMMA, EPS0, T)
    small, large = counterexample(10)
    for runs in (1, 2):
        first, second = (release_law(seeds, runs, runs)["FAILED"] for seeds in (small, large))
        assert divergence({"F": first}, {"F": second}, runs * per_run.epsilon) > runs * per_run.delta
    # at the defaults, n = 60, --count 1 --max-candidates 1: 0.0163, 2e7 times Theorem 1's delta
    default = theorem1(50, GAMMA, 1.0, 29)
    small, large = counterexample(60)
    passing = [1 - mechanism_law(seeds, 1.0, k=50)[None] for seeds in (small, large)]
    assert passing[1] == pytest.approx(60 / 61, rel=1e-4)  # the odd record's candidates fail
    failed = [{"F": 1 - p} for p in passing]
    assert divergence(*failed, default.epsilon) > 2e7 * default.delta
    # drawing until a record passes (no failure): one record a, neighbour {a, b}
    a, b = DOMAIN[0], DOMAIN[7]
    alone, pair = records_only(mechanism_law(np.array([a]))), records_only(mechanism_law(np.array([a, b])))
    conditioned = [{y: p / sum(law.values()) for y, p in law.items()} for law in (alone, pair)]
    assert hockey_stick(conditioned[1], conditioned[0], 100.0) == pytest.approx(0.5)


def test_the_sampler_draws_the_counterexamples_failures():
    """``generate_and_test`` (what the release runs) outputs nothing on D' at the exact rate."""
    _, large = counterexample(10)
    fitted = FittedModel(MODEL, structure=None, seeds=large, parameters_budget=None)  # type: ignore[arg-type]
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0)
    draws = 20_000
    result = generate_and_test(fitted, draws, config, np.random.default_rng(5), SeededNoise(6))
    exact = mechanism_law(large)[None]
    assert abs((~result.passed).mean() - exact) < 5 * math.sqrt(exact * (1 - exact) / draws)


def test_the_release_samples_this_law():
    """``synthesize`` (what the CLI runs) on the toy model: FAILED and the first record's law."""
    fitted = FittedModel(MODEL, structure=None, seeds=SEEDS, parameters_budget=None)  # type: ignore[arg-type]
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0)
    law = release_law(SEEDS, 1, 3)
    rng, noise = np.random.default_rng(3), SeededNoise(4)
    observed = {o: 0 for o in law}
    draws = 1500
    for _ in range(draws):
        run = synthesize(fitted, 1, config, rng, noise, max_candidates=3, batch=3)
        key = (tuple(int(v) for v in run.records[0]),) if len(run.records) else "FAILED"
        observed[key] += 1
    keys = [o for o in law if law[o] > 0]
    expected = np.array([law[o] for o in keys]) * draws
    assert sum(observed[o] for o in law if law[o] == 0) == 0
    assert stats.chisquare([observed[o] for o in keys], expected * draws / expected.sum()).pvalue > 1e-6


def test_each_record_is_assigned_on_its_own():
    """The model's parallel composition needs one record's presence to change its own subset
    only: with the same random stream, the first n records of n + 1 land where they did for n (a
    fixed-size split moved some: n = 12 gave 2/4/6, n = 13 gave 3/4/6), and the assignment has the
    public law."""
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
    assert stats.chisquare(subsets, np.array(shares) * subsets.sum()).pvalue > 1e-6
    assert [len(p) for p in assign_subsets(0, shares, np.random.default_rng(0))] == [0, 0, 0]


def test_an_empty_seed_set_fails_the_run_without_error():
    """A subset can be empty (any n): no seeds means every run outputs nothing."""
    fitted = FittedModel(MODEL, structure=None, seeds=SEEDS[:0], parameters_budget=None)  # type: ignore[arg-type]
    config = PlausibleConfig(k=K, gamma=GAMMA, omega=OMEGA, eps0=EPS0)
    run = synthesize(fitted, 2, config, np.random.default_rng(0), SeededNoise(0))
    assert len(run.records) == 0 and run.candidates == candidate_limit(2) == 8
