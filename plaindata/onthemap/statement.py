"""OnTheMap's privacy statement as a :class:`~petlab.plaindata.dp.privacy_cost.PrivacyCost`.

Neighbouring data sets (ICDE 2008, Section IV, as the derivation in
:mod:`petlab.plaindata.onthemap.release` uses them): the same workers, one of whom has another
origin within the same destination. Every destination's total N(d) is public; adding or removing a
worker is not covered (the written total per destination is N(d) minus the workers drawn beyond
the last band, N(d) itself with probability about 0.9-0.97), and the statement says so.

Everything here is a function of public figures only: eps, delta, the bands' keep probabilities,
and the priors, which depend on each destination's public total of workers and the geography
(:mod:`petlab.plaindata.onthemap.release`, where the bound is derived). The statement does not
change when a worker's origin moves, across the last band's edge or anywhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from petlab.plaindata.dp.privacy_cost import PROBABILISTIC_DP, PrivacyCost
from petlab.plaindata.onthemap.privacy import accept_reject_epsilon, shrunk_epsilon

NEIGHBOURS = "neighbours: one worker's origin moved within its destination"
PUBLIC = "public: every destination's number of workers N(d), the geography and the bands"
NOT_COVERED = (
    "NOT covered: adding or removing a worker (the total written per destination follows N(d), "
    "which is treated as public)"
)
TAIL_SHARE = 0.8  # of delta: leaving gamma-Rep on a kept domain within the public bounds
DOMAIN_SHARE = 0.1  # of delta, for each of the two bounds on the kept domain


@dataclass(frozen=True)
class PriorSummary:
    """What the statement needs of the priors (public: functions of N(d) and the geography)."""

    max_ceil_alpha: int
    min_alpha: float

    @classmethod
    def of(cls, alpha: np.ndarray) -> PriorSummary:
        alpha = np.asarray(alpha, dtype=float)
        if not len(alpha):
            return cls(0, math.nan)
        return cls(int(np.ceil(alpha).max()), float(alpha.min()))

    @classmethod
    def combine(cls, parts: list[PriorSummary]) -> PriorSummary:
        """The summary of a release made of parts (destinations partitioned across workers)."""
        present = [p for p in parts if not math.isnan(p.min_alpha)]
        if not present:
            return cls(0, math.nan)
        return cls(max(p.max_ceil_alpha for p in present), min(p.min_alpha for p in present))


def release_cost(
    epsilon: float, delta: float, keep: tuple[float, ...], max_miles: float, priors: PriorSummary
) -> PrivacyCost:
    """eps' = eps + ln(1 / min f) + max ceil(alpha) ln 2 - ln(1 - delta), delta: probabilistic DP
    per destination (the derivation in :mod:`petlab.plaindata.onthemap.release`)."""
    min_keep = min(keep)
    epsilon_prime = shrunk_epsilon(accept_reject_epsilon(epsilon, delta), min_keep, priors.max_ceil_alpha)
    gamma = math.expm1(epsilon)
    return PrivacyCost(
        epsilon_prime,
        delta,
        f"OnTheMap release, each destination ({NEIGHBOURS}; {PUBLIC})",
        "Theorems 4.3 and 5.2 and Lemma 5.2 with the beyond cell, derived in plaindata/onthemap/release.py",
        PROBABILISTIC_DP,
        details=(
            NOT_COVERED,
            f"Algorithm 1 priors for eps = {epsilon:g}: gamma-Rep is left with probability <= "
            f"{TAIL_SHARE:g} delta on every kept domain within the public bounds, which fail with "
            f"probability <= 2 x {DOMAIN_SHARE:g} delta (Theorems 4.3-4.4, union-tail form)",
            f"accept/reject on gamma-Good, gamma = e^eps - 1 = {gamma:.4g}, redrawing the kept domain "
            f"too: + ln(1 / (1 - delta)) (Lemma 5.2)",
            f"domain shrinking: min f = {min_keep:g}, max ceil(alpha) = {priors.max_ceil_alpha}: "
            "+ ln(1 / min f) + max ceil(alpha) ln 2 (Theorem 5.2)",
            f"smallest prior per origin block: alpha = {priors.min_alpha:.5g}",
            f"origins beyond {max_miles:g} miles: one cell per destination with prior N(d) / gamma "
            "(N(d) its public total of workers), sampled like the others and not written",
        ),
        symbol="epsilon'",
    )
