"""Privacy calculus of the OnTheMap synthesizer (Machanavajjhala et al., ICDE 2008).

Algorithm 1 draws, per destination block d, p ~ Dirichlet(n(d) + alpha(d)) and then
m(d) ~ Multinomial(p, m). This module computes the prior sample alpha that the theorems require,
in log space throughout:

* Theorem 4.1 (pure eps-DP): the worst case of equation (1) is (m + min alpha) / min alpha, so
  eps-DP holds iff every alpha_i >= m / (e^eps - 1). (The paper's example: m = 10^6, eps = 7 needs
  about 913 per origin block; it prints 914, the next integer above 912.7.)
* Definition 7, the reference 0-sample: f(x) = min(m, c (a1 + max(x - 1, 0))) and
  rho(n, m, a1, a2, c) = max over integers 0 <= x < n of
  C(m, f(x)) B(x + f(x) + a1, n - x + m - f(x) + a2) / B(x + a1, n - x + a2),
  a beta-binomial probability; C and B are taken through the gamma function, so f need not be an
  integer.
* Theorem 4.4: for eps > ln 3 and m(d) = n(d), Algorithm 1 is (eps, delta)-probabilistically DP if
  for every d, rho(n, m, min alpha, |alpha| - min alpha, e^eps - 1) <= delta (e^eps - 2) / (2 k e^eps),
  k the size of the origin domain. :func:`pdp_alpha` finds the smallest uniform alpha by bisection.
* Theorem 5.2 (domain shrinking, Algorithm 2): with empty origin blocks kept with probability
  f_d(i), eps' = eps + max_i ln(1 / f_d(i)) + max_i ceil(alpha_i) ln 2. Section VI: eps = 4.6,
  min f = 0.0378, max ceil(alpha) = 1 give eps' = 8.57, "about 8.6".
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
    """log of Definition 7's rho (module docstring), maximised over x = 0..n-1."""
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
    Theorem 4.4 for a destination with n = m(d) = n(d) workers; relative precision ``tolerance``."""
    if not 0 < delta < 1 or n < 1 or k < 2:
        raise ValueError("need 0 < delta < 1, n >= 1 and k >= 2")
    target = math.log(pdp_threshold(delta, epsilon, k))
    c = math.expm1(epsilon)

    def holds(a: float) -> bool:
        return log_rho(n, n, a, (k - 1) * a, c) <= target

    low, high = 1e-12, 1.0
    while not holds(high):
        low, high = high, high * 2
        if high > 1e12:
            raise ValueError("no alpha satisfies Theorem 4.4 for these parameters")
    while (high - low) > tolerance * high:
        middle = math.sqrt(low * high) if low > 0 else high / 2
        low, high = (low, middle) if holds(middle) else (middle, high)
    return high


def shrunk_epsilon(epsilon: float, min_keep_probability: float, max_ceil_alpha: int) -> float:
    """Theorem 5.2: the privacy of Algorithm 2 followed by Algorithm 1."""
    if not 0 < min_keep_probability <= 1:
        raise ValueError("keep probabilities lie in (0, 1]")
    return epsilon + math.log(1 / min_keep_probability) + max_ceil_alpha * math.log(2)


@dataclass(frozen=True)
class PrivacyReport:
    """What a chosen parameter set actually guarantees."""

    epsilon: float
    delta: float
    epsilon_after_shrinking: float | None
    alpha: float

    def lines(self) -> list[str]:
        out = [
            f"(epsilon, delta)-probabilistic DP: epsilon = {self.epsilon:g}, delta = {self.delta:g}",
            f"prior sample per origin block: alpha = {self.alpha:.6g}",
        ]
        if self.epsilon_after_shrinking is not None:
            out.append(f"with domain shrinking (Theorem 5.2): epsilon' = {self.epsilon_after_shrinking:.3f}")
        return out


def dirichlet_multinomial_logpmf(m: np.ndarray, n: np.ndarray, alpha: np.ndarray) -> float:
    """log P(m | n, alpha) of Algorithm 1 for one destination (used for exact checks)."""
    m, posterior = np.asarray(m, dtype=float), np.asarray(n, dtype=float) + np.asarray(alpha, dtype=float)
    total = m.sum()
    return float(
        gammaln(total + 1)
        - gammaln(m + 1).sum()
        + gammaln(posterior.sum())
        - gammaln(posterior.sum() + total)
        + (gammaln(m + posterior) - gammaln(posterior)).sum()
    )
