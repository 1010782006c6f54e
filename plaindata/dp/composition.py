"""Composition of privacy costs: the one place where they are combined (Dwork and Roth,
Theorems 3.16 and 3.20; recalled as Theorems 2 and 3 in Bindschaedler, Shokri and Gunter, VLDB
2017, Appendix A).

* Sequential (basic): mechanisms that are (eps_i, delta_i)-DP on the same records are
  (sum eps_i, sum delta_i)-DP (Theorem 3.16), adaptively chosen or not.
* Advanced: K runs of an (eps, delta)-DP mechanism are, for any delta' > 0,
  (sqrt(2 K ln(1 / delta')) eps + K eps (e^eps - 1), K delta + delta')-DP (Theorem 3.20).
* Parallel: mechanisms on disjoint subsets of the records compose to the maximum of their
  parameters (a record is seen by one of them only). The subsets must not depend on the other
  records: with a fixed-size split, adding a record moves others between subsets, and the maximum
  does not hold as stated. Assigning each record to a subset independently at random keeps it
  (derivation in :mod:`petlab.plaindata.plausible.synthesis`).

Every function returns a :class:`~petlab.plaindata.dp.accounting.PrivacyCost` that keeps its
parts. Deltas are capped at 1 (a delta of 1 holds for any mechanism: the cost is then vacuous,
and says so). Probabilistic DP (ICDE 2008) is not closed under these rules, so they accept DP
costs only, apart from :func:`report_lines` of a single cost.

:func:`per_query_epsilon` inverts both forms for a budget and returns the larger per-query eps:
advanced composition wins for many queries (the ~190 entropies of structure learning), basic for
few (the 11 conditional tables of parameter learning).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from petlab.plaindata.dp.accounting import DP, PrivacyCost

SEQUENTIAL = "sequential composition (Dwork and Roth, Theorem 3.16)"
ADVANCED = "advanced composition (Dwork and Roth, Theorem 3.20)"
PARALLEL = "parallel composition: each record in one part only"


def _dp_only(costs: Sequence[PrivacyCost]) -> None:
    if not costs:
        raise ValueError("nothing to compose")
    if any(c.notion != DP for c in costs):
        raise ValueError("only (epsilon, delta)-DP costs compose by these rules")


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
    """``count`` runs of an (epsilon, delta)-DP mechanism, by Theorem 3.20 with slack ``delta_prime``."""
    if not 0 < delta_prime < 1:
        raise ValueError("delta' must lie in (0, 1)")
    total = math.sqrt(2 * count * math.log(1 / delta_prime)) * epsilon + count * epsilon * math.expm1(epsilon)
    return PrivacyCost(total, min(1.0, count * delta + delta_prime), f"{count} runs", ADVANCED)


def best_composition(epsilon: float, count: int, delta_prime: float, delta: float = 0.0) -> PrivacyCost:
    """The smaller epsilon of the basic and advanced forms for ``count`` runs."""
    basic = basic_composition(epsilon, count, delta)
    advanced = advanced_composition(epsilon, count, delta_prime, delta)
    return basic if basic.epsilon <= advanced.epsilon else advanced


def repeated(cost: PrivacyCost, count: int, delta_prime: float, what: str) -> PrivacyCost:
    """``count`` (adaptive) runs of the mechanism that costs ``cost``: the better of the basic and
    advanced forms, with ``cost`` kept as its part."""
    _dp_only([cost])
    if count < 1:
        raise ValueError("at least one run")
    if count == 1:
        return cost.named(what)
    total = best_composition(cost.epsilon, count, delta_prime, cost.delta)
    rule = f"{count} x the part below, by {total.covered_by}"
    return PrivacyCost(total.epsilon, total.delta, what, rule, parts=(cost,))


def report_lines(costs: Sequence[PrivacyCost]) -> list[str]:
    """One cost as it stands, or several and their sequential composition."""
    if len(costs) == 1:
        return costs[0].lines()
    return sequential(costs).lines()


def per_query_epsilon(total_epsilon: float, count: int, delta_prime: float) -> float:
    """Largest eps such that ``count`` eps-DP mechanisms stay within ``total_epsilon`` by basic or
    advanced composition (with slack delta'); bisection on the advanced form, which increases in eps."""
    if not total_epsilon > 0 or count < 1:
        raise ValueError("need a positive total epsilon and at least one query")
    basic = total_epsilon / count
    low, high = 0.0, total_epsilon
    for _ in range(200):
        middle = (low + high) / 2
        if advanced_composition(middle, count, delta_prime).epsilon <= total_epsilon:
            low = middle
        else:
            high = middle
    return max(basic, low)
