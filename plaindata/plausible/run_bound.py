"""One run of the release's Mechanism 1, every outcome covered: the records (Theorem 1) and
"nothing" (derived here), and the abstention probability that makes "nothing" cost no delta.

Bindschaedler, Shokri and Gunter (VLDB 2017), Mechanism 1 and Privacy Test 2 (Section 2.1).
One run, as :func:`petlab.plaindata.plausible.synthesis.release` makes it: with probability rho
(public, drawn whatever the data) the run **abstains** and outputs nothing; otherwise it draws a
seed d uniformly from the n seeds of D_T (none: nothing), generates y ~ M(d) and outputs y if the
number c of plausible seeds of (y, d) satisfies c >= k + Lap(1 / eps0), else nothing (⊥).
Neighbours: D' = D + {d'}, one seed record added (or removed); the model is fixed.

Result: one run is (eps, delta + delta_nothing(eps))-DP over records and nothing together, with
eps = eps0 + ln(1 + gamma / t), delta = e^{-eps0 (k - t)} (Theorem 1, which holds for every
seed-set size) and delta_nothing(eps) the divergence of "nothing" (:func:`nothing_delta`), a
function of k, eps0, eps and rho only; :func:`least_abstention` is the smallest rho that makes it 0
at Theorem 1's eps (0.008 at the defaults; without abstention it is about 1 / (k + 9), whatever
eps). The derivation (two facts about Laplace noise and counts, the records, then "nothing" when a
seed is added or removed, and its horizon) is on the documentation site:
``docs/explanation/proofs/plausible-deniability.md``.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal

import numpy as np

HORIZON_CAP = 2_000_000  # seed-set sizes evaluated one by one; beyond, the tail bound


def survival(x: np.ndarray, eps0: float) -> np.ndarray:
    """S(x) = P(Lap(1 / eps0) > x)."""
    x = np.asarray(x, dtype=float)
    return np.where(x >= 0, 0.5 * np.exp(-eps0 * np.maximum(x, 0)), 1 - 0.5 * np.exp(eps0 * np.minimum(x, 0)))


def horizon(k: int, eps0: float) -> int:
    """N: sizes below it are evaluated exactly (phi(n) < e^-60 beyond k + 60 / eps0)."""
    return int(min(k + math.ceil(60 / eps0) + 1000, HORIZON_CAP))


def _terms(k: int, eps0: float, epsilon: float) -> tuple[np.ndarray, np.ndarray, float, float]:
    """For each bound (the proof page of the module docstring): the coefficient pair (A, B) with
    g = rho (1 - e^eps) + (1 - rho)(A - e^eps B), for every n < N and every candidate F, and the
    two tails' A."""
    n_max = horizon(k, eps0)
    grow = math.exp(epsilon)
    n = np.arange(n_max, dtype=float)
    phi = survival(n - k, eps0)
    phi_next = survival(n + 1 - k, eps0)
    # adding: A = (n phi(n) + 1) / (n + 1), B = phi(n), for n >= 1
    add = ((n * phi + 1) / (n + 1) - grow * phi)[1:]
    # removing: A = F, B = G(F), F in {phi(n), 1, e^eps0 phi(n + 1)} clamped to [phi(n), 1]
    kink = np.clip(math.exp(eps0) * phi_next, phi, 1.0)
    removes = []
    for f in (phi, np.ones_like(phi), kink):
        f = np.where(n == 0, 1.0, f)  # the empty seed set fails every run
        g = np.maximum(phi_next, (math.exp(-eps0) * n * f + phi_next) / (n + 1))
        removes.append(f - grow * g)
    tail_add = 1 / (n_max + 1)
    tail_remove = max(0.0, 1 - math.exp(epsilon - eps0) * n_max / (n_max + 1))
    return add, np.max(removes, axis=0), tail_add, tail_remove


def nothing_delta(k: int, eps0: float, epsilon: float, abstain: float) -> float:
    """delta_nothing(eps) for abstention probability ``abstain`` (the proof page of the module
    docstring)."""
    if not 0 <= abstain < 1 or epsilon < 0 or eps0 <= 0 or k < 1:
        raise ValueError("need 0 <= abstain < 1, epsilon >= 0, eps0 > 0 and k >= 1")
    add, remove, tail_add, tail_remove = _terms(k, eps0, epsilon)
    worst = max(float(add.max(initial=-math.inf)), float(remove.max()), tail_add, tail_remove)
    return max(0.0, abstain * (1 - math.exp(epsilon)) + (1 - abstain) * worst)


def least_abstention(k: int, eps0: float, epsilon: float) -> float:
    """The smallest rho, two significant digits rounded up, with nothing_delta = 0 at ``epsilon``:
    rho / (1 - rho) >= max(A - e^eps B) / (e^eps - 1) (the proof page of the module docstring)."""
    if not epsilon > 0:
        raise ValueError("abstention can cover nothing only at a positive epsilon")
    add, remove, tail_add, tail_remove = _terms(k, eps0, epsilon)
    worst = max(float(add.max(initial=-math.inf)), float(remove.max()), tail_add, tail_remove)
    ratio = max(0.0, worst) / math.expm1(epsilon)
    exact = Decimal(repr(ratio / (1 + ratio)))
    if exact == 0:
        return 0.0
    rho = float(exact.quantize(Decimal(1).scaleb(exact.adjusted() - 1), rounding=ROUND_CEILING))
    if rho >= 1 or nothing_delta(k, eps0, epsilon, rho) > 0:
        raise ValueError("no abstention below 1 keeps 'nothing' within this epsilon: give --abstain")
    return rho
