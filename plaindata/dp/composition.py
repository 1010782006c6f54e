"""Composition of differentially private mechanisms (Dwork and Roth, Theorems 3.16 and 3.20;
recalled as Theorems 2 and 3 in Bindschaedler, Shokri and Gunter, VLDB 2017, Appendix A).

* Sequential (basic): K mechanisms that are each (eps, delta)-DP are (K eps, K delta)-DP.
* Advanced: for any delta' > 0 they are (eps_total, K delta + delta')-DP with
  eps_total = sqrt(2 K ln(1 / delta')) eps + K eps (e^eps - 1).
* Parallel: mechanisms run on disjoint subsets of the records compose to the maximum of their
  parameters (each record is seen by one of them only).

:func:`per_query_epsilon` inverts both forms for a budget and returns the larger per-query eps:
advanced composition wins for many queries (the ~190 entropies of structure learning), basic for
few (the 11 conditional tables of parameter learning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    epsilon: float
    delta: float

    def __str__(self) -> str:
        return f"({self.epsilon:.4g}, {self.delta:.3g})"


def basic_composition(epsilon: float, count: int, delta: float = 0.0) -> Budget:
    return Budget(count * epsilon, count * delta)


def advanced_composition(epsilon: float, count: int, delta_prime: float, delta: float = 0.0) -> Budget:
    if not 0 < delta_prime < 1:
        raise ValueError("delta' must lie in (0, 1)")
    total = math.sqrt(2 * count * math.log(1 / delta_prime)) * epsilon + count * epsilon * math.expm1(epsilon)
    return Budget(total, count * delta + delta_prime)


def best_composition(epsilon: float, count: int, delta_prime: float) -> Budget:
    """The smaller of the basic and advanced totals for ``count`` pure eps-DP mechanisms."""
    basic = basic_composition(epsilon, count)
    advanced = advanced_composition(epsilon, count, delta_prime)
    return basic if basic.epsilon <= advanced.epsilon else advanced


def parallel_composition(*budgets: Budget) -> Budget:
    return Budget(max(b.epsilon for b in budgets), max(b.delta for b in budgets))


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
