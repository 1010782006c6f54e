"""One run of the release's Mechanism 1, every outcome covered: the records (Theorem 1) and
"nothing" (derived here), and the abstention probability that makes "nothing" cost no delta.

Bindschaedler, Shokri and Gunter (VLDB 2017), Mechanism 1 and Privacy Test 2 (Section 2.1).
One run, as :func:`petlab.plaindata.plausible.synthesis.release` makes it: with probability rho
(public, drawn whatever the data) the run **abstains** and outputs nothing; otherwise it draws a
seed d uniformly from the n seeds of D_T (none: nothing), generates y ~ M(d) and outputs y if the
number c of plausible seeds of (y, d) satisfies c >= k + Lap(1 / eps0), else nothing (⊥).
Neighbours: D' = D + {d'}, one seed record added (or removed); the model is fixed.

Notation. S(x) = P(Lap(1 / eps0) > x) (x >= 0: e^{-eps0 x} / 2; x < 0: 1 - e^{eps0 x} / 2);
pi(x) = 1 - S(x). f_D(d) = P(fail | seed d) = sum_y Pr{y = M(d)} S(c_D(y, d) - k);
F_D = (1/n) sum_{d in D} f_D(d) (F_empty = 1); P_D(⊥) = rho + (1 - rho) F_D.

Two facts about Laplace noise and counts (only these are used, so they hold for the lattice
Laplace OpenDP samples too, and for a count capped by ``max_plausible``):

(a) c_D(y, d) <= n, so f_D(d) >= S(n - k) =: phi(n) and F_D >= phi(n).
(b) Adding d' raises each count c_D(y, d), d in D, by 0 or 1 (partitions depend on y and gamma,
    not on D), and S(x + 1) >= e^{-eps0} S(x), pi(x + 1) <= e^{eps0} pi(x) (the density moves by
    at most e^{eps0} under a shift of 1). So e^{-eps0} f_D(d) <= f_D'(d) <= f_D(d).

**Records** (sets Y of records). Theorem 1: P_D'(Y) <= e^eps P_D(Y) + delta and the reverse, with
eps = eps0 + ln(1 + gamma / t), delta = e^{-eps0 (k - t)}, 1 <= t < k. The paper states it for
seed sets of at least k records; it holds for every n, with delta / 2. Fix y; seeds in y's
partition j of d' number c. Adding d': if c >= t, the partition's mass S_j = sum p_d(y) gains
p_{d'}(y) <= gamma S_j / c <= (gamma / t) S_j and its pass probability gains at most e^{eps0}
(fact b), while 1/(n + 1) < 1/n and the other partitions only gain: factor e^eps. If c < t, the
pass probability is at most pi(t - k), and these outputs carry total mass at most pi(t - k) =
e^{-eps0 (k - t)} / 2 (the sum over y of (1/(n+1)) sum_{d in D'} p_d(y) is 1). Removing d': every
term of P_D'(y) is at least (n / (n + 1)) times P_D(y)'s (fact b), so P_D(y) <= (1 + 1/n) P_D'(y)
<= (1 + gamma / t) P_D'(y) when n >= t, and P_D(Y) <= pi(n - k) <= e^{-eps0 (k - t)} / 2 when
n < t. Abstention scales both sides by 1 - rho. So Theorem 1's delta covers the records for every
n, the empty seed set included.

**Nothing.** Adding d' (D has n >= 1 seeds; n = 0 gives P_D(⊥) = 1, nothing to bound):
F_D' <= (n F_D + 1) / (n + 1) (fact b, f_D'(d') <= 1), so

  P_D'(⊥) - e^eps P_D(⊥) <= g_add(n) = rho + (1 - rho)(n phi(n) + 1)/(n + 1) - e^eps (rho + (1 - rho) phi(n)),

the right side falling in F_D (n / (n + 1) < e^eps), so F_D = phi(n) is the worst (fact a).
Removing d' (D has n >= 0 seeds, F = F_D in [phi(n), 1], F = 1 for n = 0): F_D' >= G(F) =
max(phi(n + 1), (e^{-eps0} n F + phi(n + 1)) / (n + 1)) (facts a, b), so

  P_D(⊥) - e^eps P_D'(⊥) <= g_rem(n, F) = rho + (1 - rho) F - e^eps (rho + (1 - rho) G(F)),

concave and piecewise linear in F: its maximum is at F = phi(n), F = 1 or the kink F = e^{eps0}
phi(n + 1). Beyond a horizon N: g_add(n) <= rho (1 - e^eps) + (1 - rho) / (N + 1), and
g_rem(n, F) <= rho (1 - e^eps) + (1 - rho) max(0, 1 - e^{eps - eps0} N / (N + 1)). So

  delta_nothing(eps) = max(0, g_add(n) for 1 <= n < N, g_rem(n, F) for 0 <= n < N, both tails),

a function of k, eps0, eps and rho only, and one run is (eps, delta + delta_nothing(eps))-DP over
records and nothing together (the hockey-stick divergence is a sum over outcomes: the records' part
is at most delta, nothing's at most delta_nothing). The bound is tight: n identical seeds and a
d' sharing no kept attribute make F_D = phi(n) and f_D'(d') close to 1. Without abstention
(rho = 0) the worst n is about k + 8 / eps0 and delta_nothing is about 1 / (k + 9) (0.0166 at the
defaults), whatever eps: the count of records written tells whether a seed with few look-alikes
is present. :func:`least_abstention` is the smallest rho (two significant digits, rounded up)
with delta_nothing(eps) = 0 at Theorem 1's eps: 0.008 at the defaults.
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
    """For each bound (module docstring): the coefficient pair (A, B) with g = rho (1 - e^eps) +
    (1 - rho)(A - e^eps B), for every n < N and every candidate F, and the two tails' A."""
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
    """delta_nothing(eps) for abstention probability ``abstain`` (module docstring)."""
    if not 0 <= abstain < 1 or epsilon < 0 or eps0 <= 0 or k < 1:
        raise ValueError("need 0 <= abstain < 1, epsilon >= 0, eps0 > 0 and k >= 1")
    add, remove, tail_add, tail_remove = _terms(k, eps0, epsilon)
    worst = max(float(add.max(initial=-math.inf)), float(remove.max()), tail_add, tail_remove)
    return max(0.0, abstain * (1 - math.exp(epsilon)) + (1 - abstain) * worst)


def least_abstention(k: int, eps0: float, epsilon: float) -> float:
    """The smallest rho, two significant digits rounded up, with nothing_delta = 0 at ``epsilon``:
    rho / (1 - rho) >= max(A - e^eps B) / (e^eps - 1) (module docstring)."""
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
