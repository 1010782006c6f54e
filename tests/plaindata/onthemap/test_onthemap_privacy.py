"""OnTheMap's privacy calculus against the ICDE 2008 paper's worked numbers, and Theorem 4.1 by
exhaustive enumeration on tiny domains."""

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from onthemap_law import dirichlet_multinomial_logpmf
from scipy import stats

from petlab.plaindata.onthemap.privacy import (
    SLACK,
    accept_reject_epsilon,
    dp_alpha,
    gamma_good,
    gamma_good_by_group,
    log_beta_binomial_sf,
    log_rho,
    log_union_tail,
    pdp_alpha,
    pdp_threshold,
    shrunk_domain_bounds,
    shrunk_epsilon,
    shrunk_union_tail_alphas,
    union_tail_alphas,
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


def moves(counts: np.ndarray):
    """Every neighbour of an origin histogram: one worker moved from one block to another."""
    for i, j in itertools.permutations(range(len(counts)), 2):
        if counts[i]:
            moved = counts.copy()
            moved[i] -= 1
            moved[j] += 1
            yield moved


def exact_max_ratio(n: int, m: int, k: int, alpha: np.ndarray) -> float:
    """Max over neighbouring inputs (one worker moved between origin blocks) and all outputs."""
    best = 0.0
    for counts in compositions(n, k):
        for moved in moves(counts):
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


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_pdp_alpha_never_exceeds_the_pure_dp_prior(n):
    """For n = 2 Theorem 4.4 asks for 21.3 where Theorem 4.1's pure-DP prior, a stronger
    guarantee, needs 0.0203. The PDP prior is never larger than the pure-DP one."""
    eps, delta, k = 4.6, 1e-5, 233726
    alpha = pdp_alpha(n, eps, delta, k)
    assert alpha <= n / math.expm1(eps) * (1 + 1e-12)
    assert pdp_alpha(2, eps, delta, k) == pytest.approx(2 / math.expm1(eps))


def test_bad_parameters():
    with pytest.raises(ValueError, match="ln 3"):
        pdp_threshold(1e-5, 1.0, 10)
    with pytest.raises(ValueError):
        dp_alpha(0, 1.0)
    with pytest.raises(ValueError):
        shrunk_epsilon(1.0, 0.0, 1)


# --- gamma-Rep, gamma-Good, Lemma 5.2 and the union-tail bound, by enumeration on tiny domains ---


def in_rep(output, counts, alpha, gamma) -> bool:
    return bool((output <= gamma * (alpha + np.maximum(counts - 1, 0))).all())


def in_good_brute_force(output, counts, alpha, gamma) -> bool:
    """Definition: the union of gamma-Rep(X') over X' = X and every within-destination move."""
    return in_rep(output, counts, alpha, gamma) or any(in_rep(output, m, alpha, gamma) for m in moves(counts))


def exact_output_law(counts, alpha, m):
    outputs = list(compositions(m, len(counts)))
    probabilities = np.exp([dirichlet_multinomial_logpmf(o, counts, alpha) for o in outputs])
    return outputs, probabilities


@pytest.mark.parametrize("gamma", [0.7, 1.5, 3.0])
def test_gamma_good_matches_its_definition(gamma):
    k, n, a = 4, 4, 0.6
    checked = 0
    for counts in compositions(n, k):
        for output in compositions(n, k):
            expected = in_good_brute_force(output, counts, a, gamma)
            assert gamma_good(counts, output, a, gamma) == expected
            good = gamma_good_by_group(np.zeros(k, int), counts, output, np.array([a]), gamma, 1)[0]
            assert good == expected
            checked += 1
    assert checked == 35 * 35


def test_gamma_good_by_group_on_many_destinations():
    rng = np.random.default_rng(5)
    groups, cells = 300, 6
    counts = rng.integers(0, 4, size=(groups, cells))
    outputs = rng.integers(0, 5, size=(groups, cells))
    alpha = rng.uniform(0.5, 1.5, groups)
    gamma = 2.0
    group = np.repeat(np.arange(groups), cells)
    vectorised = gamma_good_by_group(group, counts.ravel(), outputs.ravel(), alpha, gamma, groups)
    scalar = [gamma_good(counts[g], outputs[g], alpha[g], gamma) for g in range(groups)]
    assert vectorised.tolist() == scalar
    assert 10 < sum(scalar) < groups - 10  # both outcomes are exercised


def test_lemma_5_2_derived_bound_by_enumeration():
    """Accept/reject on gamma-Good: every neighbour ratio on gamma-Rep(X) outputs is within
    (gamma + 1) / (1 - p), and the accepted output leaves gamma-Rep(X) with probability <= p."""
    k, n, a, gamma = 3, 3, 1.0, 2.0
    alpha = np.full(k, a)
    inputs = list(compositions(n, k))
    law = {}
    p = 0.0
    for counts in inputs:
        outputs, probabilities = exact_output_law(counts, alpha, n)
        good = np.array([gamma_good(counts, o, a, gamma) for o in outputs])
        rep = np.array([in_rep(o, counts, a, gamma) for o in outputs])
        p = max(p, probabilities[~rep].sum())
        accepted = np.where(good, probabilities, 0.0) / probabilities[good].sum()
        law[tuple(counts)] = (outputs, accepted, rep)
    assert 0 < p < 0.5
    bound = (gamma + 1) / (1 - p)
    worst = 0.0
    for counts in inputs:
        outputs, accepted, rep = law[tuple(counts)]
        assert accepted[~rep].sum() <= p + 1e-12
        for moved in moves(counts):
            _, accepted_moved, _ = law[tuple(moved)]
            ratios = accepted[rep] / accepted_moved[rep]
            worst = max(worst, ratios.max(), (1 / ratios).max())
    assert worst <= bound * (1 + 1e-9)
    assert worst >= (gamma + 1) * (1 - 1e-9)  # Theorem 4.3's factor is attained
    assert accept_reject_epsilon(math.log(gamma + 1), p) == pytest.approx(math.log(bound))


def test_union_tail_bounds_the_exact_probability_of_leaving_gamma_rep():
    k, n, eps = 3, 4, 1.2
    gamma = math.expm1(eps)
    for a in (0.05, 0.3, 1.0):
        alpha = np.full(k, a)
        worst = 0.0
        for counts in compositions(n, k):
            outputs, probabilities = exact_output_law(counts, alpha, n)
            rep = np.array([in_rep(o, counts, a, gamma) for o in outputs])
            worst = max(worst, probabilities[~rep].sum())
        bound = math.exp(log_union_tail(n, k, a, gamma)[0])
        assert worst <= bound + 1e-12
        assert bound < 4 * worst + 1e-12  # and it is not vacuous


def test_union_tail_alphas_satisfy_their_bound_and_beat_theorem_4_4():
    eps, delta, k = 4.6, 1e-5, 233726
    n = np.array([1, 2, 5, 15, 60, 300])
    alphas = union_tail_alphas(n, k, eps, delta)
    assert (log_union_tail(n, k, alphas, math.expm1(eps)) <= math.log(delta)).all()
    assert (alphas <= n / math.expm1(eps) + 1e-15).all()  # never above Theorem 4.1's pure-DP prior
    for size, alpha in zip(n[2:], alphas[2:], strict=True):
        assert alpha <= pdp_alpha(int(size), eps, delta, k)  # same guarantee, smaller prior
    # a step below the returned alpha (on the refinement scale) breaks the bound for typical n
    assert log_union_tail(15, k, alphas[3] * 0.99, math.expm1(eps))[0] > math.log(delta)


@pytest.mark.parametrize("epsilon", [2.0, 3.0, 4.6, 6.0, 8.0])
def test_boundary_priors_accept_their_boundary_draws(epsilon):
    """alpha = n / gamma (what the union-tail search returns for small n) puts gamma * alpha exactly
    on the bound; floating point must not reject the draw that sits on it (found by the eps sweep)."""
    gamma = math.expm1(epsilon)
    for n in (1, 2, 3):
        alpha = n / gamma
        assert gamma_good(np.array([n]), np.array([n]), alpha, gamma)
        good = gamma_good_by_group(np.array([0]), np.array([n]), np.array([n]), np.array([alpha]), gamma, 1)
        assert good[0]


def test_shrunk_domain_bounds_hold_for_the_binomial_sum():
    """The Chernoff and Bernstein bounds on the public Bernoulli sum S (each failing w.p. <= 1%),
    checked against 200,000 simulated sums per geography."""
    rng = np.random.default_rng(3)
    keep = np.array([1.0, 0.6, 0.3, 0.15, 0.08, 0.05, 0.0378])
    for band_blocks in ([3, 10, 30, 60, 200, 600, 2000], [1, 2, 2, 5, 8, 20, 60], [9, 40, 150, 0, 0, 0, 0]):
        bounds = shrunk_domain_bounds(np.array([band_blocks]), keep, 0.01)
        sums = sum(rng.binomial(k, f, size=200_000) for k, f in zip(band_blocks, keep, strict=True))
        assert (sums < bounds.k_low[0]).mean() <= 0.01
        assert (sums > bounds.empty_high[0]).mean() <= 0.01
        assert bounds.k_low[0] <= np.quantile(sums, 0.01) and bounds.empty_high[0] >= np.quantile(sums, 0.99)


@pytest.mark.parametrize("x", [0, 1, 3])
def test_beta_binomial_tails_fall_as_the_domain_grows(x):
    """The step of the shrunk-domain bound: T_k(x) is non-increasing in k (its derivation)."""
    n, a, gamma = 12, 0.4, math.expm1(1.5)
    bound = math.floor(gamma * (a + max(x - 1, 0)))
    tails = [stats.betabinom.sf(bound, n, x + a, n - x + (k - 1) * a) for k in range(2, 400)]
    assert all(later <= earlier + 1e-15 for earlier, later in itertools.pairwise(tails))
    assert tails[-1] < tails[0]


def _partitions(total: int, largest: int | None = None):
    """Integer partitions of ``total`` (non-increasing parts)."""
    largest = total if largest is None else largest
    if total == 0:
        yield []
        return
    for first in range(min(total, largest), 0, -1):
        for rest in _partitions(total - first, first):
            yield [first, *rest]


def _empty_blocks_within(t: int, empty: int, a: float, bound: int) -> float:
    """P(no block gets more than ``bound``) when t workers fall on ``empty`` blocks by the
    symmetric Dirichlet-multinomial DirMult(t; a, ..., a): a sum over the partitions of t, each
    composition's probability t!/prod c_i! Gamma(e a)/Gamma(e a + t) prod Gamma(c_i + a)/Gamma(a)
    times its number of arrangements e!/((e - parts)! prod multiplicities!)."""
    total = 0.0
    for parts in _partitions(t):
        if len(parts) > empty or (parts and parts[0] > bound):
            continue
        log_arrangements = (
            math.lgamma(empty + 1)
            - math.lgamma(empty - len(parts) + 1)
            - sum(math.lgamma(m + 1) for m in Counter(parts).values())
        )
        log_composition = (
            math.lgamma(t + 1)
            + math.lgamma(empty * a)
            - math.lgamma(empty * a + t)
            + sum(math.lgamma(c + a) - math.lgamma(a) - math.lgamma(c + 1) for c in parts)
        )
        total += math.exp(log_arrangements + log_composition)
    return total


def test_shrunk_prior_bounds_the_exact_probability_of_leaving_gamma_rep():
    """Exact computation on a small geography: for every kept domain within the public bounds (k'
    inside blocks from k_low to all, at most empty_high empty, and the beyond cell B) and every data
    set of n = 3 workers (0 to 3 of them beyond), Algorithm 1 with the chosen prior leaves gamma-Rep
    with probability at most delta_tails; a prior chosen for the full domain
    does not.

    By the aggregation property, the synthetic counts of the r non-empty blocks, the total t on
    the e empty ones and B's are DirMult(n; x_1 + a, ..., x_r + a, e a, n_B + n / gamma), and
    given t the empty blocks get the symmetric DirMult(t; a, ..., a)."""
    epsilon, delta_tails = 1.2, 0.16
    gamma = math.expm1(epsilon)
    band_blocks, keep = np.array([[4, 40]]), np.array([1.0, 0.5])
    bounds = shrunk_domain_bounds(band_blocks, keep, 0.02)
    n, blocks = 3, int(band_blocks.sum())
    alpha_beyond = n / gamma

    def worst_leaving_rep(alpha: float, smallest: int, most_empty: int) -> float:
        worst = 0.0
        for real in ([3], [2, 1], [1, 1, 1], [2], [1, 1], [1], []):
            x, beyond = np.array(real, dtype=int), n - sum(real)
            for k in range(max(smallest, len(real), 1), blocks + 1):
                empty = k - len(real)
                if empty > most_empty:
                    continue
                cells = np.r_[x, 0, beyond]
                priors = np.r_[np.full(len(x), alpha), empty * alpha, alpha_beyond]
                if empty == 0:
                    cells, priors = np.delete(cells, len(x)), np.delete(priors, len(x))
                stays = 0.0
                for output in compositions(n, len(cells)):
                    inside, rest = output[: len(x)], output[len(x) :]
                    if not in_rep(inside, x, alpha, gamma) or not in_rep(
                        rest[-1:], np.array([beyond]), alpha_beyond, gamma
                    ):
                        continue
                    p = math.exp(dirichlet_multinomial_logpmf(output, cells, priors))
                    if empty:
                        p *= _empty_blocks_within(
                            int(rest[0]), empty, alpha, math.floor(gamma * alpha * SLACK)
                        )
                    stays += p
                worst = max(worst, 1 - stays)
        return worst

    inside_blocks = band_blocks.sum(axis=1)
    alpha = float(shrunk_union_tail_alphas(np.array([n]), bounds, epsilon, delta_tails, inside_blocks)[0])
    assert bounds.k_low[0] >= 2 and alpha < n / gamma  # a real search, not the pure-DP prior
    assert 0 < worst_leaving_rep(alpha, bounds.k_low[0], bounds.empty_high[0]) <= delta_tails
    full = float(union_tail_alphas(n, blocks, epsilon, delta_tails)[0])
    assert worst_leaving_rep(full, bounds.k_low[0], bounds.empty_high[0]) > delta_tails


def _exact_tail(bound: int, n: int, a: float, b: float) -> Fraction:
    """P(BetaBinomial(n; a, b) > bound) as an exact rational: C(n, j) (a)_j (b)_{n-j} / (a + b)_n
    with rising factorials of the floats' exact values."""
    a_, b_ = Fraction(a), Fraction(b)

    def rising(x: Fraction, k: int) -> Fraction:
        out = Fraction(1)
        for i in range(k):
            out *= x + i
        return out

    terms = sum(math.comb(n, j) * rising(a_, j) * rising(b_, n - j) for j in range(bound + 1, n + 1))
    return terms / rising(a_ + b_, n)


def test_beta_binomial_tails_are_exact_where_the_priors_are_chosen():
    """The tails of the union bound at the priors the search returns (eps 4.6, delta 1e-5, the
    paper's 233,726 blocks), against exact rationals: within a relative 1e-9. scipy's
    ``betabinom.sf`` (1 - cdf), which the search used before, is off by 45% to 200% there."""
    gamma, k = math.expm1(4.6), 233_726
    worst_scipy = 0.0
    for n in (5, 15, 60):
        a = float(union_tail_alphas(n, k, 4.6, 1e-5)[0])
        for x in (0, 1):
            bound = math.floor(gamma * (a + max(x - 1, 0)))
            exact = _exact_tail(bound, n, x + a, n - x + (k - 1) * a)
            ours = math.exp(float(log_beta_binomial_sf(bound, n, x + a, n - x + (k - 1) * a)))
            assert abs(Fraction(ours) - exact) <= 1e-9 * exact
            scipy_value = stats.betabinom.sf(bound, n, x + a, n - x + (k - 1) * a)
            worst_scipy = max(worst_scipy, abs(float((Fraction(float(scipy_value)) - exact) / exact)))
    assert worst_scipy > 0.4
    # an empty tail, a certain one, and arrays of mixed shapes
    assert log_beta_binomial_sf(5, 5, 1.0, 1.0) == -np.inf
    assert log_beta_binomial_sf(-1, 5, 1.0, 1.0) == pytest.approx(0.0, abs=1e-12)
    many = log_beta_binomial_sf(np.array([0, 1, 2]), 4, 0.5, np.array([[3.0], [7.0]]))
    assert many.shape == (2, 3) and (np.diff(many, axis=1) < 0).all()
