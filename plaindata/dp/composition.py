"""Composition of privacy costs: the one place where they are combined.

* Optimal composition (:func:`compose`, :func:`repeated`): mechanisms that are (eps_i, delta_i)-DP
  compose to the tightest (eps, delta) that holds for *every* such sequence (Kairouz, Oh and
  Viswanath, ICML 2015, Theorem 3.3 for K equal mechanisms; Murtagh and Vadhan 2016 for unequal
  ones). It is computed with Google's ``dp_accounting``: each (eps_i, delta_i) mechanism is
  dominated by the privacy-loss distribution of randomized response with failure probability
  delta_i (``from_privacy_parameters``); the PLDs are convolved and read at the target delta
  (``get_epsilon_for_delta``). Losses are discretised upwards, so the figure is an upper bound of
  the optimal one: each loss is rounded up by about half a step of eps_min /
  :data:`STEPS_PER_EPSILON`, so the composed figure is at most a few tenths of a percent above
  the optimum (``tests/plaindata/dp/test_optimal_composition.py``). The total delta is the one the advanced
  composition theorem states (sum delta_i + delta'), so old and new figures compare at equal
  delta.
* Sequential (basic, Dwork and Roth Theorem 3.16): (sum eps_i, sum delta_i). Kept as the floor:
  :func:`repeated` and :func:`compose` return the smaller epsilon of the two (the basic form at
  its own, smaller, delta).
* Advanced (Dwork and Roth Theorem 3.20): kept only to compare its figures with the optimal
  composition's (``docs/explanation/privacy-accounting.md``); nothing prints it.
* Parallel: mechanisms on disjoint subsets of the records compose to the maximum of their
  parameters (a record is seen by one of them only). The subsets must not depend on the other
  records: with a fixed-size split, adding a record moves others between subsets. Assigning each
  record to a subset independently at random keeps it.

Every function returns a :class:`~petlab.plaindata.dp.privacy_cost.PrivacyCost` that keeps its
parts. Deltas are capped at 1 (a delta of 1 holds for any mechanism: the cost is then vacuous,
and says so). Probabilistic DP (ICDE 2008) is not closed under these rules, so they accept DP
costs only, apart from :func:`report_lines` of a single cost.

:func:`per_query_epsilon` inverts the optimal composition of K equal pure-DP mechanisms for a
budget (bisection; the composed epsilon increases with the per-query one).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence

from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld

from petlab.plaindata.dp.privacy_cost import DP, PrivacyCost

SEQUENTIAL = "sequential composition (Dwork and Roth, Theorem 3.16)"
ADVANCED = "advanced composition (Dwork and Roth, Theorem 3.20)"
OPTIMAL = "optimal composition (Kairouz, Oh and Viswanath), dp_accounting PLD accountant"
PARALLEL = "parallel composition: each record in one part only"
STEPS_PER_EPSILON = 300  # discretisation of the smallest privacy loss: about 0.2% pessimism


def _dp_only(costs: Sequence[PrivacyCost]) -> None:
    if not costs:
        raise ValueError("nothing to compose")
    if any(c.notion != DP for c in costs):
        raise ValueError("only (epsilon, delta)-DP costs compose by these rules")


@functools.lru_cache(maxsize=4096)
def optimal_epsilon(mechanisms: tuple[tuple[float, float, int], ...], delta_total: float) -> float:
    """The smallest epsilon (up to discretisation, upwards) such that the composition of
    ``count`` x (eps, delta) for every (eps, delta, count) in ``mechanisms`` is
    (epsilon, delta_total)-DP, by dp_accounting's privacy-loss distributions. inf when
    delta_total is below the mass the deltas alone put at infinite loss."""
    if not 0 < delta_total <= 1:
        raise ValueError("the target delta lies in (0, 1]")
    # half a step off the lattice: dp_accounting rounds the losses +eps and -eps up (ceil), and
    # with eps / interval = STEPS + 1/2 both land half a step up, whatever the float error (with
    # exactly STEPS, error flipped ceil between STEPS and STEPS + 1 for nearby inputs)
    interval = min(eps for eps, _, _ in mechanisms if eps > 0) / (STEPS_PER_EPSILON + 0.5)
    composed = None
    for eps, delta, count in mechanisms:
        if count < 1:
            raise ValueError("each mechanism runs at least once")
        one = pld.from_privacy_parameters(
            pld_common.DifferentialPrivacyParameters(eps, delta), value_discretization_interval=interval
        )
        part = one.self_compose(count) if count > 1 else one
        composed = part if composed is None else composed.compose(part)
    assert composed is not None
    with warnings.catch_warnings():  # an unreachable delta overflows inside dp_accounting: inf
        warnings.simplefilter("ignore", RuntimeWarning)
        value = float(composed.get_epsilon_for_delta(delta_total))
    return value if math.isfinite(value) and value >= 0 else math.inf


def sequential(costs: Sequence[PrivacyCost], what: str = "total") -> PrivacyCost:
    """Basic sequential composition: epsilons and deltas add."""
    _dp_only(costs)
    return PrivacyCost(
        sum(c.epsilon for c in costs),
        min(1.0, sum(c.delta for c in costs)),
        what,
        SEQUENTIAL,
        parts=tuple(costs),
    )


def compose(costs: Sequence[PrivacyCost], delta_prime: float, what: str = "total") -> PrivacyCost:
    """Optimal composition of different mechanisms at total delta sum delta_i + delta', or the
    basic form when its epsilon is smaller (module docstring)."""
    _dp_only(costs)
    basic = sequential(costs, what)
    if not 0 < delta_prime < 1 or basic.vacuous or all(c.epsilon == 0 for c in costs):
        return basic
    target = min(1.0, basic.delta + delta_prime)
    epsilon = optimal_epsilon(tuple((c.epsilon, c.delta, 1) for c in costs if c.epsilon > 0), target)
    if epsilon >= basic.epsilon:
        return basic
    return PrivacyCost(epsilon, target, what, OPTIMAL, parts=tuple(costs))


def parallel(costs: Sequence[PrivacyCost], what: str = "total") -> PrivacyCost:
    """Mechanisms on disjoint (or independently assigned) parts of the records: the maximum."""
    _dp_only(costs)
    return PrivacyCost(
        max(c.epsilon for c in costs), max(c.delta for c in costs), what, PARALLEL, parts=tuple(costs)
    )


def basic_composition(epsilon: float, count: int, delta: float = 0.0) -> PrivacyCost:
    """``count`` runs of an (epsilon, delta)-DP mechanism, by Theorem 3.16."""
    return PrivacyCost(count * epsilon, min(1.0, count * delta), f"{count} runs", SEQUENTIAL)


def advanced_composition(epsilon: float, count: int, delta_prime: float, delta: float = 0.0) -> PrivacyCost:
    """``count`` runs of an (epsilon, delta)-DP mechanism, by Theorem 3.20 with slack ``delta_prime``
    (not what petlab prints, which composes optimally: kept for the comparison only)."""
    if not 0 < delta_prime < 1:
        raise ValueError("delta' must lie in (0, 1)")
    total = math.sqrt(2 * count * math.log(1 / delta_prime)) * epsilon + count * epsilon * math.expm1(epsilon)
    return PrivacyCost(total, min(1.0, count * delta + delta_prime), f"{count} runs", ADVANCED)


def optimal_composition(epsilon: float, count: int, delta_prime: float, delta: float = 0.0) -> PrivacyCost:
    """``count`` runs of an (epsilon, delta)-DP mechanism at total delta count delta + delta',
    optimally (module docstring), or the basic form when its epsilon is smaller."""
    if not 0 < delta_prime < 1:
        raise ValueError("delta' must lie in (0, 1)")
    basic = basic_composition(epsilon, count, delta)
    if count == 1 or epsilon == 0 or basic.vacuous:
        return basic
    target = min(1.0, count * delta + delta_prime)
    total = optimal_epsilon(((epsilon, delta, count),), target)
    if total >= basic.epsilon:
        return basic
    return PrivacyCost(total, target, f"{count} runs", OPTIMAL)


def repeated(cost: PrivacyCost, count: int, delta_prime: float, what: str) -> PrivacyCost:
    """``count`` (adaptive) runs of the mechanism that costs ``cost``: the optimal composition
    (or the basic one when smaller), with ``cost`` kept as its part."""
    _dp_only([cost])
    if count < 1:
        raise ValueError("at least one run")
    if count == 1:
        return cost.named(what)
    total = optimal_composition(cost.epsilon, count, delta_prime, cost.delta)
    rule = f"{count} x the part below, by {total.covered_by}"
    return PrivacyCost(total.epsilon, total.delta, what, rule, parts=(cost,))


def report_lines(costs: Sequence[PrivacyCost], what: str = "total") -> list[str]:
    """One cost as it stands, or several and their sequential composition (pure DP parts: the
    sum is then the optimal composition at delta 0), under the name ``what``."""
    if len(costs) == 1:
        return costs[0].named(what if what != "total" else costs[0].what).lines()
    return sequential(costs, what).lines()


@functools.lru_cache(maxsize=1024)
def per_query_epsilon(total_epsilon: float, count: int, delta_prime: float) -> float:
    """Largest eps (to a relative 1e-4, rounded down) such that ``count`` eps-DP mechanisms stay
    within (``total_epsilon``, delta') by :func:`optimal_composition`; bisection."""
    if not total_epsilon > 0 or count < 1:
        raise ValueError("need a positive total epsilon and at least one query")
    basic = total_epsilon / count
    if count == 1:
        return basic
    low, high = basic, total_epsilon
    while high - low > 1e-4 * low:
        middle = (low + high) / 2
        if optimal_composition(middle, count, delta_prime).epsilon <= total_epsilon:
            low = middle
        else:
            high = middle
    return low
