"""The plausible-deniability release as it runs: every observable output enumerated exactly on a
toy model, against every DP figure ``petlab-synth plausible`` prints; a Monte Carlo check at the
command's defaults.

The release (``release``, ``petlab-synth plausible --runs L``) makes L independent runs; each
abstains with probability rho, else runs Mechanism 1 (``mechanism_law`` of
``test_plausible_mechanism_law``, from the project's own seed probabilities and plausible-seed
counts: a record y with probability P_D(y), nothing otherwise). What is written is the sequence
of passing records (its length included), so the release outputs (y_1..y_j) with probability
sum over the placements of the j records among the L runs of prod P(y_i) P(nothing)^{L - j}.
Every figure printed for the seeds (one run; the L runs) is checked against that exact law,
"nothing" and the number written included, on neighbours that differ by one seed record:
the counterexample (n identical seeds, one added record sharing no kept attribute), the pair
49 a + b against 50 a + b, the empty seed set against one seed, and random pairs; at small k and
at the defaults (k = 50, eps0 = 1, t = 29).
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
from scipy import stats
from test_plausible_mechanism_law import DOMAIN, GAMMA, MODEL, OMEGA, SEEDS, mechanism_law

from petlab.plaindata.dp.composition import repeated
from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.dp.privacy_cost import PrivacyCost
from petlab.plaindata.plausible import statement
from petlab.plaindata.plausible.bayes_structure import Structure
from petlab.plaindata.plausible.privacy_tests import theorem1
from petlab.plaindata.plausible.run_bound import least_abstention, nothing_delta
from petlab.plaindata.plausible.synthesis import FittedModel, PlausibleConfig, assign_subsets, release

FIGURE = re.compile(
    r"^\s*(?P<what>.*): \(epsilon = (?P<eps>[0-9.e+-]+)(?:, delta = (?P<delta>[0-9.e+-]+))?\)-DP"
)
SMALL = PlausibleConfig(k=4, gamma=GAMMA, omega=OMEGA, eps0=2.0, t=2, model_delta=0.01)
TINY = PlausibleConfig(k=2, gamma=GAMMA, omega=OMEGA, eps0=1.0, t=1, model_delta=0.01)
DEFAULTS = PlausibleConfig(gamma=GAMMA, omega=OMEGA)  # k = 50, eps0 = 1, t = 29 as the command's


def run_law(seeds: np.ndarray, config: PlausibleConfig, rho: float) -> dict:
    """One run: a record (tuple) or nothing (None)."""
    law = mechanism_law(seeds, config.eps0, k=config.k) if len(seeds) else {None: 1.0}
    out = {y: (1 - rho) * p for y, p in law.items() if y is not None}
    out[None] = 1 - sum(out.values())
    return out


def release_law(seeds: np.ndarray, config: PlausibleConfig, rho: float, runs: int) -> dict:
    """The exact law of what L runs write: the tuple of passing records, in run order."""
    one = run_law(seeds, config, rho)
    law: dict = {}
    for outcome in itertools.product(list(one), repeat=runs):
        written = tuple(y for y in outcome if y is not None)
        law[written] = law.get(written, 0.0) + math.prod(one[o] for o in outcome)
    return law


def divergence(first: dict, second: dict, epsilon: float) -> float:
    """The DP delta at epsilon between two laws, both directions (the worst set of outputs)."""
    keys = set(first) | set(second)

    def one_way(p: dict, q: dict) -> float:
        return sum(max(0.0, p.get(o, 0.0) - math.exp(epsilon) * q.get(o, 0.0)) for o in keys)

    return max(one_way(first, second), one_way(second, first))


def printed(config: PlausibleConfig, runs: int) -> list[tuple[str, float, float]]:
    """The DP figures of the statement the command prints (the toy model has no DP budget, so
    the figures for the runs given the model are printed)."""
    fitted = FittedModel(MODEL, Structure(MODEL.parents, MODEL.order, None, 0.0, 0), SEEDS, None)
    out = []
    for line in statement.report_lines(fitted, config, runs):
        match = FIGURE.match(line)
        if match:
            out.append((match["what"], float(match["eps"]), float(match["delta"] or 0)))
    return out


def counterexample(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n identical seeds, and the same plus one record sharing no kept attribute (attribute 0)."""
    base = np.zeros((n, 3), dtype=np.int64)
    return base, np.vstack([base, [1, 1, 1]])


def one_more_a_pair(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n - 1 seeds sharing the kept value a and one other, against the same with an n-th a."""
    base = np.vstack([np.zeros((n - 1, 3), dtype=np.int64), [[1, 0, 0]]])
    return base, np.vstack([base, [0, 1, 1]])


def empty_pair() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, 3), dtype=np.int64), np.array([[1, 1, 0]])


def random_neighbours(rng: np.random.Generator, pairs: int):
    for _ in range(pairs):
        seeds = np.array([DOMAIN[i] for i in rng.integers(len(DOMAIN), size=int(rng.integers(1, 8)))])
        yield seeds, np.vstack([seeds, DOMAIN[int(rng.integers(len(DOMAIN)))]])


def check_statement(config: PlausibleConfig, pairs, runs: int) -> int:
    """Every printed seeds figure against the exact law of what it covers; the number checked."""
    figures = [f for f in printed(config, runs) if "seed record added or removed" in f[0]]
    rho = statement.abstention(config)
    checked = 0
    for what, epsilon, delta in figures:
        covered = 1 if what.startswith("one run") else runs
        assert what.startswith(("one run", f"the {runs} runs")), what
        for small, large in pairs:
            first = release_law(small, config, rho, covered)
            second = release_law(large, config, rho, covered)
            assert divergence(first, second, epsilon) <= delta, (what, len(small))
            checked += 1
    assert checked, "a figure for the runs, everything written, is printed"
    return checked


@pytest.mark.parametrize("runs", [1, 2, 3])
def test_every_printed_figure_holds_exactly_at_small_k(runs):
    pairs = [counterexample(n) for n in (4, 6, 9)] + [one_more_a_pair(4), one_more_a_pair(6), empty_pair()]
    pairs += list(random_neighbours(np.random.default_rng(42), 6))
    assert check_statement(SMALL, pairs, runs) == (1 if runs == 1 else 2) * len(pairs)
    check_statement(TINY, [counterexample(2), counterexample(5), empty_pair(), one_more_a_pair(2)], runs)


def test_every_printed_figure_holds_exactly_at_the_defaults():
    """k = 50, eps0 = 1, t = 29: the counterexample at the worst size for "nothing" (n = 58), 49 a + b
    against 50 a + b, and the empty seed set; two runs."""
    pairs = [counterexample(58), counterexample(50), one_more_a_pair(50), empty_pair()]
    check_statement(DEFAULTS, pairs, 2)


def test_nothing_needs_the_abstention():
    """Without abstention Theorem 1's figure, composed over the runs, fails on the counterexample
    (the count written moves by about 1 / (n + 1) a run), and run_bound's delta_nothing is what the
    exact law needs (tight within 2 % at the defaults); half the default abstention is not enough."""
    bound = theorem1(50, GAMMA, 1.0, 29)
    small, large = counterexample(58)
    exact = divergence(
        release_law(small, DEFAULTS, 0.0, 1), release_law(large, DEFAULTS, 0.0, 1), bound.epsilon
    )
    assert exact > 1e6 * bound.delta
    assert exact <= nothing_delta(50, 1.0, bound.epsilon, 0.0) + bound.delta <= 1.02 * exact
    two = repeated(PrivacyCost(bound.epsilon, bound.delta), 2, 0.01, "two runs")
    law = [release_law(seeds, DEFAULTS, 0.0, 2) for seeds in (small, large)]
    assert divergence(*law, two.epsilon) > two.delta
    rho = least_abstention(50, 1.0, bound.epsilon)
    assert statement.abstention(DEFAULTS) == rho == pytest.approx(0.0079)
    half = [release_law(seeds, DEFAULTS, rho / 2, 1) for seeds in (small, large)]
    assert divergence(*half, bound.epsilon) > 1e6 * bound.delta
    small_k = theorem1(4, GAMMA, 2.0, 2)
    pairs = [counterexample(n) for n in range(1, 12)]
    worst = max(divergence(*(release_law(s, SMALL, 0.0, 1) for s in pair), small_k.epsilon) for pair in pairs)
    assert worst <= nothing_delta(4, 2.0, small_k.epsilon, 0.0) + small_k.delta


def test_the_release_samples_this_law():
    """``release`` (what the command runs) on the toy model, two runs: what it writes, the
    number written included (chi-square over the exact law's outcomes)."""
    fitted = FittedModel(MODEL, structure=None, seeds=SEEDS, parameters_budget=None)  # type: ignore[arg-type]
    rho = 0.3  # large, so that abstention shows in the counts
    law = release_law(SEEDS, SMALL, rho, 2)
    rng, noise = np.random.default_rng(3), SeededNoise(4)
    observed = dict.fromkeys(law, 0)
    draws = 1500
    for _ in range(draws):
        run = release(fitted, 2, SMALL, rho, rng, noise)
        observed[tuple(tuple(int(v) for v in r) for r in run.records)] += 1
    keys = [o for o in law if law[o] * draws >= 5]
    rest = draws - sum(observed[o] for o in keys)
    expected = [law[o] * draws for o in keys] + [draws * (1 - sum(law[o] for o in keys))]
    assert stats.chisquare([observed[o] for o in keys] + [rest], expected).pvalue > 1e-6


def test_monte_carlo_at_the_defaults():
    """The command's defaults (k = 50, gamma = 4, eps0 = 1, t = 29, the default abstention) run by
    ``release`` itself, on the toy model.

    1. Plausible deniability: with 49 identical seeds every written record has 49 < k plausible
       seeds; the share of runs that write one must not exceed the printed bound. One-sided
       Clopper-Pearson lower bound at confidence 1 - 1e-6 (the true share equals the bound).
    2. DP of one run on the counterexample at n = 58, the event "nothing written": the lower
       confidence bound of P_D'(nothing) must not exceed e^eps times the upper bound of
       P_D(nothing) plus delta, each bound at confidence 1 - 1e-6 (true ratio 3.08, e^eps 3.09).
    """
    rho = statement.abstention(DEFAULTS)
    line = statement.deniability_line(DEFAULTS)
    match = re.search(r"fewer than k = 50 plausible seeds with probability at most ([0-9.e+-]+)", line)
    claimed = float(match[1]) if match else 0.0  # "Definition 1 for every record" claims 0
    fitted = FittedModel(MODEL, structure=None, seeds=np.zeros((49, 3), np.int64), parameters_budget=None)  # type: ignore[arg-type]
    runs = 20_000
    written = len(release(fitted, runs, DEFAULTS, rho, np.random.default_rng(7), SeededNoise(8)).records)
    lower = stats.binomtest(written, runs).proportion_ci(1 - 2e-6, "exact").low
    assert lower <= claimed
    ((_, epsilon, delta),) = [f for f in printed(DEFAULTS, 2) if f[0].startswith("one run")]
    for abstain, holds in ((rho, True), (0.0, False)):  # without abstention the check fails
        nothing = []
        for seeds in counterexample(58):
            fitted = FittedModel(MODEL, structure=None, seeds=seeds, parameters_budget=None)  # type: ignore[arg-type]
            result = release(fitted, runs, DEFAULTS, abstain, np.random.default_rng(9), SeededNoise(10))
            nothing.append(stats.binomtest(runs - len(result.records), runs).proportion_ci(1 - 2e-6, "exact"))
        assert (nothing[1].low <= math.exp(epsilon) * nothing[0].high + delta) == holds


def test_each_record_is_assigned_on_its_own():
    """The whole release's parallel composition needs one record's presence to change its own
    subset only: with the same random stream, the first n records of n + 1 land where they did for
    n, and the assignment has the public law."""
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


def test_an_empty_seed_set_writes_nothing_without_error():
    """A subset can be empty (any n): no seeds means every run writes nothing."""
    fitted = FittedModel(MODEL, structure=None, seeds=SEEDS[:0], parameters_budget=None)  # type: ignore[arg-type]
    run = release(fitted, 8, SMALL, 0.0, np.random.default_rng(0), SeededNoise(0))
    assert len(run.records) == 0 and run.runs == run.candidates == 8 and run.passed == 0
