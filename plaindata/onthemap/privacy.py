"""Privacy calculus of the OnTheMap synthesizer (Machanavajjhala et al., ICDE 2008).

Algorithm 1 draws, per destination block d, p ~ Dirichlet(n(d) + alpha(d)) and then
m(d) ~ Multinomial(p, m). This module computes the prior sample alpha that the theorems require,
in log space throughout:

* Theorem 4.1 (pure eps-DP): every alpha_i >= m / (e^eps - 1) (:func:`dp_alpha`).
* Definition 7's reference 0-sample rho (:func:`log_rho`) and Theorem 4.4's smallest uniform alpha
  (:func:`pdp_alpha`, bisection).
* The union-tail form of Theorem 4.4 that the release uses: exact beta-binomial tails, summed
  term by term (:func:`log_beta_binomial_sf`, :func:`log_union_tail`, :func:`union_tail_alpha`),
  and with the release's beyond cell :func:`shrunk_union_tail_alphas`.
* Accept/reject (Section V-A, Lemma 5.2, derived for a mechanism A): membership in gamma-Good
  (:func:`gamma_good`, :func:`gamma_good_by_group`) and eps_ar = ln((gamma + 1) / (1 - p)),
  delta = p (:func:`accept_reject_epsilon`).
* Theorem 5.2 (domain shrinking, Algorithm 2): eps' = eps + max_i ln(1 / f_d(i)) + max_i
  ceil(alpha_i) ln 2 (:func:`shrunk_epsilon`; Section VI: eps = 4.6, min f = 0.0378 give 8.57).

The derivations, each theorem's statement and the conditions it needs are on the documentation
site: ``docs/explanation/proofs/onthemap.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, gammaln


def dp_alpha(m: int, epsilon: float) -> float:
    """Theorem 4.1: the smallest alpha_i giving eps-DP for a synthetic sample of size m."""
    if m < 1 or epsilon <= 0:
        raise ValueError("m must be positive and epsilon positive")
    return m / math.expm1(epsilon)


def worst_case_ratio(m: int, min_alpha: float) -> float:
    """Theorem 4.1's maximum of equation (1)."""
    return (m + min_alpha) / min_alpha


def log_rho(n: int, m: int, a1: float, a2: float, c: float) -> float:
    """log of Definition 7's rho (docs/explanation/proofs/onthemap.md), maximised over x = 0..n-1."""
    if n < 1 or m < 0 or a1 <= 0 or a2 <= 0 or c <= 0:
        raise ValueError("rho needs n >= 1, m >= 0 and positive a1, a2, c")
    x = np.arange(n, dtype=float)
    f = np.minimum(m, c * (a1 + np.maximum(x - 1, 0)))
    log_binomial = gammaln(m + 1) - gammaln(f + 1) - gammaln(m - f + 1)
    log_values = log_binomial + betaln(x + f + a1, n - x + m - f + a2) - betaln(x + a1, n - x + a2)
    return float(log_values.max())


def pdp_threshold(delta: float, epsilon: float, k: int) -> float:
    """Theorem 4.4's right-hand side, delta (e^eps - 2) / (2 k e^eps)."""
    if epsilon <= math.log(3):
        raise ValueError("Theorem 4.4 needs epsilon > ln 3")
    return delta * (math.exp(epsilon) - 2) / (2 * k * math.exp(epsilon))


def pdp_alpha(n: int, epsilon: float, delta: float, k: int, tolerance: float = 1e-4) -> float:
    """The smallest uniform alpha (alpha_i = a for all k origin blocks, so |alpha| = k a) meeting
    Theorem 4.4 for a destination with n = m(d) = n(d) workers; relative precision ``tolerance``.

    Never above Theorem 4.1's pure-DP prior n / (e^eps - 1): that prior gives (eps, 0)-DP, which
    implies (eps, delta)-PDP, so it is always a valid answer. For small n Theorem 4.4's condition
    (a point probability that cannot fall below delta / k when one worker must land somewhere) is
    far more demanding than needed, or has no solution at all: n = 2 at eps 4.6, delta 1e-5 gave
    21.3 against the pure-DP 0.0203."""
    if not 0 < delta < 1 or n < 1 or k < 2:
        raise ValueError("need 0 < delta < 1, n >= 1 and k >= 2")
    pure = dp_alpha(n, epsilon)
    target = math.log(pdp_threshold(delta, epsilon, k))
    c = math.expm1(epsilon)

    def holds(a: float) -> bool:
        return log_rho(n, n, a, (k - 1) * a, c) <= target

    if not holds(pure):
        return pure
    low, high = 1e-12, pure
    while (high - low) > tolerance * high:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if holds(middle) else (middle, high)
    return high


def log_beta_binomial_sf(bound, n, a, b) -> np.ndarray:
    """log P(X > bound) for X ~ BetaBinomial(n; a, b), exactly: the sum of the pmf terms
    j = floor(bound) + 1 .. n, each log C(n, j) + log B(j + a, n - j + b) - log B(a, b) from
    ``gammaln``, added in log space (``logsumexp``). Arrays broadcast; -inf for an empty tail.

    ``scipy.stats.betabinom.sf`` is 1 - cdf: it loses every digit below 1e-16 (0 where the tail is
    2.2e-13) and is 0.9% low at 8e-10, which would let the prior search accept priors whose tails
    exceed the bound. Here every term is computed on its own, so the relative error is that of
    ``gammaln`` differences (about 1e-13 for the sizes used;
    ``tests/plaindata/onthemap/test_onthemap_privacy.py`` checks it against exact rationals)."""
    bound, n, a, b = (np.asarray(v) for v in np.broadcast_arrays(bound, n, a, b))
    shape = n.shape
    bound, n, a, b = (v.ravel() for v in (bound, n, a, b))
    n = n.astype(np.int64)
    first = np.clip(np.floor(bound).astype(np.int64) + 1, 0, None)
    terms = np.maximum(n - first + 1, 0)
    out = np.full(len(n), -np.inf)
    ends = np.cumsum(terms)
    start = 0
    while start < len(n):  # chunks of about TERMS_PER_CHUNK terms bound the memory
        stop = max(
            int(np.searchsorted(ends, ends[start] - terms[start] + TERMS_PER_CHUNK, "right")), start + 1
        )
        rows = np.arange(start, stop)
        rows = rows[terms[rows] > 0]
        if len(rows):
            out[rows] = _log_sum_of_terms(first[rows], terms[rows], n[rows], a[rows], b[rows])
        start = stop
    return out.reshape(shape)


TERMS_PER_CHUNK = 2_000_000


def _log_sum_of_terms(first, terms, n, a, b) -> np.ndarray:
    owner = np.repeat(np.arange(len(n)), terms)
    j = (np.arange(int(terms.sum())) - np.repeat(np.cumsum(terms) - terms, terms) + first[owner]).astype(
        float
    )
    nn, aa, bb = n[owner].astype(float), a[owner].astype(float), b[owner].astype(float)
    log_terms = (
        gammaln(nn + 1) - gammaln(j + 1) - gammaln(nn - j + 1) + betaln(j + aa, nn - j + bb) - betaln(aa, bb)
    )
    peak = np.full(len(n), -np.inf)
    np.maximum.at(peak, owner, log_terms)
    total = np.zeros(len(n))
    np.add.at(total, owner, np.exp(log_terms - peak[owner]))
    return peak + np.log(total)


TAIL_MARGIN = 1e-9  # relative, upwards: the bound is never below the exact tail's float rounding


def log_union_tail(n, k, a, c, empty_blocks=None, shrunk: bool = False, beyond_mass=0.0) -> np.ndarray:
    """log of E T(0) + O max_x T(x) (docs/explanation/proofs/onthemap.md) for arrays of (n, k, a); c = gamma.
    The tails T are taken at domain size k (plus ``beyond_mass``, the prior of the beyond cell,
    which every inside cell's tail sees in its second beta parameter); E, the number of empty
    blocks the union runs over, is k unless ``empty_blocks`` is given, and O, the number of
    non-empty blocks, is min(k, n), or n when ``shrunk`` (k is then only a lower bound on the
    domain: :func:`shrunk_union_tail_alphas`)."""
    n, k, a, beyond_mass = (np.atleast_1d(np.asarray(v)) for v in np.broadcast_arrays(n, k, a, beyond_mass))
    empty_count = k if empty_blocks is None else np.broadcast_to(np.asarray(empty_blocks), k.shape)
    n = n.astype(np.int64)
    occupied_count = n if shrunk else np.minimum(k, n)
    if (n < 1).any() or (k < 1).any() or (a <= 0).any() or c <= 0 or (beyond_mass < 0).any():
        raise ValueError("need n >= 1, k >= 1, a > 0, gamma > 0 and a non-negative beyond mass")
    if ((k < 2) & (beyond_mass <= 0)).any():
        raise ValueError("a domain of one cell has no tail to bound (k >= 2, or a beyond cell)")
    owner = np.repeat(np.arange(len(n)), n + 1)
    x = np.arange(len(owner)) - np.repeat(np.cumsum(n + 1) - (n + 1), n + 1)
    nn, kk, aa = n[owner], k[owner].astype(float), a[owner].astype(float)
    bound = np.floor(c * (aa + np.maximum(x - 1, 0)) * (1 + 1e-12))
    reachable = bound < nn  # m_i <= n, so a bound at or above n has an empty tail
    log_tail = np.full(len(owner), -np.inf)
    log_tail[reachable] = log_beta_binomial_sf(
        bound[reachable],
        nn[reachable],
        (x + aa)[reachable],
        (nn - x + (kk - 1) * aa + beyond_mass[owner])[reachable],
    ) + math.log1p(TAIL_MARGIN)
    empty = log_tail[x == 0]
    occupied = np.full(len(n), -np.inf)
    np.maximum.at(occupied, owner[x > 0], log_tail[x > 0])
    with np.errstate(divide="ignore"):
        return np.logaddexp(
            np.log(np.asarray(empty_count, dtype=float)) + empty,
            np.log(occupied_count.astype(float)) + occupied,
        )


_SEARCHED: dict[tuple, float] = {}  # (n, k, E, eps, delta, shrunk, beyond, grid, refinements) -> alpha
_SEARCHED_LIMIT = 200_000


def union_tail_alphas(
    n,
    k,
    epsilon: float,
    delta: float,
    grid_points: int = 60,
    refinements: int = 12,
    empty_blocks=None,
    shrunk: bool = False,
    beyond: bool = False,
) -> np.ndarray:
    """For each public (n, k): a uniform alpha with P(S not in gamma-Rep(X)) <= delta for every X
    (union-tail form, docs/explanation/proofs/onthemap.md), all pairs at once.

    The bound is not monotone in alpha (the floor in the tail's threshold makes it jump where
    gamma alpha crosses an integer), so bisection from [0, n / gamma] could stop at a large
    alpha. Instead: a geometric grid of ``grid_points`` values from 1e-4 n / gamma up to n / gamma
    (which always satisfies the bound), the first grid value that satisfies it, then bisection
    between it and the grid value below, keeping an alpha that satisfies the bound throughout.
    ``empty_blocks`` and ``shrunk`` as in :func:`log_union_tail`; ``beyond``: the destination
    also has the beyond cell, with prior n / gamma (:func:`beyond_prior`).
    """
    n, k = (np.atleast_1d(np.asarray(v, dtype=np.int64)) for v in np.broadcast_arrays(n, k))
    empty = k if empty_blocks is None else np.broadcast_to(np.asarray(empty_blocks, dtype=np.int64), k.shape)
    if not 0 < delta < 1 or epsilon <= 0 or (n < 1).any() or (k < (1 if beyond else 2)).any():
        raise ValueError("need 0 < delta < 1, epsilon > 0, n >= 1 and k >= 2 (k >= 1 with the beyond cell)")
    # the search is a function of public parameters only: remember it (repeated releases, tests)
    settings = (float(epsilon), float(delta), shrunk, beyond, grid_points, refinements)
    keys = [(int(a), int(b), int(e), *settings) for a, b, e in zip(n, k, empty, strict=True)]
    missing = np.array([key not in _SEARCHED for key in keys], dtype=bool)
    if missing.any():
        if len(_SEARCHED) > _SEARCHED_LIMIT:
            _SEARCHED.clear()
        found = _search_union_tail_alphas(
            n[missing], k[missing], empty[missing], epsilon, delta, grid_points, refinements, shrunk, beyond
        )
        _SEARCHED.update(
            zip((key for key, m in zip(keys, missing, strict=True) if m), found.tolist(), strict=True)
        )
    return np.array([_SEARCHED[key] for key in keys])


def _search_union_tail_alphas(
    n, k, empty, epsilon: float, delta: float, grid_points: int, refinements: int, shrunk: bool, beyond: bool
) -> np.ndarray:
    c, target = math.expm1(epsilon), math.log(delta)
    mass = beyond_prior(n, epsilon) if beyond else np.zeros(len(n))
    scale = np.geomspace(1e-4, 1.0, grid_points)
    grid = (n / c)[:, None] * scale[None, :]
    holds = (
        log_union_tail(
            np.repeat(n, grid_points),
            np.repeat(k, grid_points),
            grid.ravel(),
            c,
            np.repeat(empty, grid_points),
            shrunk,
            np.repeat(mass, grid_points),
        )
        <= target
    )
    holds = holds.reshape(len(n), grid_points)
    holds[:, -1] = True  # n / gamma: every tail is empty
    first = holds.argmax(axis=1)
    high = grid[np.arange(len(n)), first]
    low = np.where(first > 0, grid[np.arange(len(n)), np.maximum(first - 1, 0)], high)
    for _ in range(refinements):
        middle = np.sqrt(low * high)
        ok = log_union_tail(n, k, middle, c, empty, shrunk, mass) <= target
        high = np.where(ok, middle, high)
        low = np.where(ok, low, middle)
    return high


@dataclass(frozen=True)
class ShrunkDomainBounds:
    """Public bounds on the domain Algorithm 2 samples for each destination (see
    :func:`shrunk_domain_bounds`): at least ``k_low`` blocks kept, at most ``empty_high`` of them
    empty, each failing with probability at most ``delta_each``."""

    k_low: np.ndarray
    empty_high: np.ndarray
    delta_each: float


def shrunk_domain_bounds(band_blocks: np.ndarray, keep: np.ndarray, delta_each: float) -> ShrunkDomainBounds:
    """Lower bound on the kept domain size k' and upper bound on its number of empty blocks, for
    destinations with ``band_blocks[d, b]`` blocks (empty or not) in band b, kept w.p. ``keep[b]``.

    Algorithm 2 keeps every non-empty block and each empty block of band b with probability f_b.
    Couple it with keeping *every* block of band b with probability f_b: the kept domain is then
    at least that Bernoulli sum S, and the empty kept blocks at most S. S is a public quantity (it
    depends on the geography, not on the data), with mean mu = sum_b f_b K_b. For sums of
    independent Bernoullis, P(S <= mu - t) <= exp(-t^2 / (2 mu)) (Chernoff) and
    P(S >= mu + t) <= exp(-t^2 / (2 mu + 2 t / 3)) (Bernstein; variance <= mu). Solving each for
    ``delta_each``: k_low = floor(mu - sqrt(2 mu L)) and empty_high = ceil(mu + L / 3 +
    sqrt(L^2 / 9 + 2 mu L)), L = ln(1 / delta_each). k_low below 2 means no useful lower bound."""
    band_blocks = np.asarray(band_blocks, dtype=float)
    mu = band_blocks @ np.asarray(keep, dtype=float)
    log_inverse = math.log(1 / delta_each)
    k_low = np.floor(mu - np.sqrt(2 * mu * log_inverse)).astype(np.int64)
    empty_high = np.ceil(mu + log_inverse / 3 + np.sqrt(log_inverse**2 / 9 + 2 * mu * log_inverse))
    return ShrunkDomainBounds(k_low, empty_high.astype(np.int64), delta_each)


def beyond_prior(n, epsilon: float) -> np.ndarray:
    """The prior of a destination's beyond cell: n / gamma, n its public total of workers. Then
    gamma alpha_B = n, so the cell never leaves gamma-Rep whatever the data (it holds at most n
    synthetic workers): it never causes a rejection and adds no tail to the union bound."""
    return np.asarray(n, dtype=float) / math.expm1(epsilon)


def shrunk_union_tail_alphas(
    n: np.ndarray,
    bounds: ShrunkDomainBounds,
    epsilon: float,
    delta_tails: float,
    inside_blocks: np.ndarray,
    bins_per_octave: int = 4,
) -> np.ndarray:
    """A uniform alpha per destination, for its origin blocks inside the last band, such that on
    the event {k' >= k_low, empty kept blocks <= empty_high}, P(S not in gamma-Rep(X) | kept
    domain) <= ``delta_tails`` for every X. The destination's domain is its kept inside blocks
    plus the beyond cell (prior :func:`beyond_prior`, always kept); ``inside_blocks`` is the
    number of blocks inside the last band (public).

    Derivation. Given the kept domain D' (k' inside blocks, e' of them empty, and the beyond cell
    B), Algorithm 1 runs on D', and by the union bound P(S not in gamma-Rep | D') is at most the sum
    over cells of the probability that the cell exceeds its gamma-Rep bound. B never does (gamma
    alpha_B = n). An inside cell with x real workers has the synthetic count BetaBinomial(n; x + a,
    n - x + (k' - 1) a + alpha_B), whose tail T_{k'}(x) (the union-tail form,
    docs/explanation/proofs/onthemap.md) is non-increasing in its second parameter (the Beta share
    falls as beta grows, and the binomial mixture keeps the order), so non-increasing in k'. Hence,
    for k' >= max(k_low, 1) (the cell itself is kept) and e' <= E = min(empty_high, inside_blocks)
    (no more empty blocks than there are blocks), the bound is at most E T_{k_low}(0) + n max_x
    T_{k_low}(x) (at most n inside blocks are non-empty), which :func:`log_union_tail` evaluates
    with k = max(k_low, 1), E, ``shrunk`` and the beyond mass. The search never returns more than n
    / gamma (Theorem 4.1's prior, for which every tail is empty whatever the domain).

    To bound the number of searches, destinations are grouped by n and by k rounded *down* and E
    rounded *up* to a geometric grid (``bins_per_octave`` steps per doubling): each group's alpha
    is searched at its worst corner, which bounds every member (tails fall with k, the union grows
    with E)."""
    n = np.asarray(n, dtype=np.int64)
    gamma = math.expm1(epsilon)
    if not len(n):
        return n / gamma
    k_low = np.maximum(bounds.k_low, 1)
    empty_high = np.minimum(bounds.empty_high, np.asarray(inside_blocks, dtype=np.int64))

    def down(values: np.ndarray) -> np.ndarray:
        steps = np.floor(np.log2(values) * bins_per_octave)
        return np.maximum(np.floor(2 ** (steps / bins_per_octave)), 1).astype(np.int64)

    def up(values: np.ndarray) -> np.ndarray:
        steps = np.ceil(np.log2(np.maximum(values, 1)) * bins_per_octave)
        return np.ceil(2 ** (steps / bins_per_octave)).astype(np.int64)

    k_bin = np.minimum(down(k_low), k_low)
    e_bin = np.maximum(up(empty_high), empty_high)
    keys, inverse = np.unique(np.stack([n, k_bin, e_bin]), axis=1, return_inverse=True)
    searched = union_tail_alphas(
        keys[0], keys[1], epsilon, delta_tails, empty_blocks=keys[2], shrunk=True, beyond=True
    )
    return np.minimum(searched[inverse.ravel()], n / gamma)


def union_tail_alpha(n: int, epsilon: float, delta: float, k: int) -> float:
    """:func:`union_tail_alphas` for one (n, k)."""
    return float(union_tail_alphas(n, k, epsilon, delta)[0])


def accept_reject_epsilon(epsilon: float, delta: float) -> float:
    """Lemma 5.2 as derived in docs/explanation/proofs/onthemap.md: eps - ln(1 - delta)."""
    if not 0 <= delta < 1:
        raise ValueError("delta lies in [0, 1)")
    return epsilon - math.log1p(-delta)


# gamma-Rep's bounds are attained exactly by priors such as alpha = n / gamma (Theorem 4.1's, which
# the union-tail search returns for small n): gamma * alpha then lands a hair either side of the
# integer it equals, and a draw on the boundary was rejected forever (found by the eps = 2 sweep).
# The comparisons allow a relative 1e-9, far below any change in a count.
SLACK = 1.0 + 1e-9


def gamma_good(n_counts, m_counts, alpha, gamma: float) -> bool:
    """Is one destination's output in gamma-Good(X)? Arrays cover every origin with n_i > 0 or
    m_i > 0 (all other origins have m_i = 0 and cannot violate); ``alpha`` is one prior for all,
    or one per cell."""
    n_counts, m_counts = np.asarray(n_counts), np.asarray(m_counts)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), n_counts.shape)
    violating = m_counts > SLACK * gamma * (alpha + np.maximum(n_counts - 1, 0))
    if not violating.any():
        return True
    if violating.sum() > 1:
        return False
    c = int(np.flatnonzero(violating)[0])
    if n_counts[c] == 0 or m_counts[c] > SLACK * gamma * (alpha[c] + n_counts[c]):
        return False
    donors = (n_counts >= 1) & (m_counts <= SLACK * gamma * (alpha + np.maximum(n_counts - 2, 0)))
    donors[c] = False
    return bool(donors.any())


def gamma_good_by_group(
    group: np.ndarray,
    n_counts: np.ndarray,
    m_counts: np.ndarray,
    alpha: np.ndarray,
    gamma: float,
    groups: int,
    cell_alpha: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`gamma_good` for many destinations at once: cell j belongs to destination group[j];
    alpha is per destination, unless ``cell_alpha`` gives one per cell (the beyond cell has its
    own prior). Returns one boolean per destination."""
    group, n_counts, m_counts = (np.asarray(v, dtype=np.int64) for v in (group, n_counts, m_counts))
    a = np.asarray(alpha, dtype=float)[group] if cell_alpha is None else np.asarray(cell_alpha, dtype=float)
    violating = m_counts > SLACK * gamma * (a + np.maximum(n_counts - 1, 0))
    violations = np.bincount(group[violating], minlength=groups)
    donor = (n_counts >= 1) & (m_counts <= SLACK * gamma * (a + np.maximum(n_counts - 2, 0)))
    donors = np.bincount(group[donor], minlength=groups)
    repairable = violating & (n_counts >= 1) & (m_counts <= SLACK * gamma * (a + n_counts))
    fixable = np.zeros(groups, dtype=bool)
    # a donor other than the violating cell itself (a violating cell is never a donor)
    fixable[group[repairable]] = donors[group[repairable]] > 0
    single_repairable = np.bincount(group[repairable], minlength=groups) == 1
    return (violations == 0) | ((violations == 1) & single_repairable & fixable)


def shrunk_epsilon(epsilon: float, min_keep_probability: float, max_ceil_alpha: int) -> float:
    """Theorem 5.2: the privacy of Algorithm 2 followed by Algorithm 1."""
    if not 0 < min_keep_probability <= 1:
        raise ValueError("keep probabilities lie in (0, 1]")
    return epsilon + math.log(1 / min_keep_probability) + max_ceil_alpha * math.log(2)
