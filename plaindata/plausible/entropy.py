"""Empirical entropy, its sensitivity (equation 9, derived here), and noisy entropies (equations 8, 10).

Bindschaedler, Shokri and Gunter (VLDB 2017), Section 3.3.1 and Appendix B. Entropies are in nats.

**Sensitivity (equation 9; the extraction lost it, so it is derived here).** Let h be a histogram
of n records, H(h) = ln n - (1/n) sum_v h_v ln h_v. Neighbours add or remove one record.

* Upper side. Adding a record of value j makes the law P' = (n/(n+1)) P + (1/(n+1)) e_j, a
  two-component mixture, so H(P') <= (n/(n+1)) H(P) + h_b(1/(n+1)) (the entropy of a mixture is at
  most the mixture of the entropies plus the entropy of the weights), hence
  H(P') - H(P) <= h_b(1/(n+1)) - H(P)/(n+1) <= h_b(1/(n+1)).
* Lower side. Concavity gives H(P') >= (n/(n+1)) H(P), so H(P) - H(P') <= H(P)/(n+1) <= ln(n)/(n+1)
  (n records take at most n values), which is below h_b(1/(n+1)).
* Tight: a point mass (H = 0) plus one record of another value has entropy h_b(1/(n+1)).

So the entropy of a histogram over n and n+1 records changes by at most h_b(1/(n+1)), where
h_b(p) = -p ln p - (1-p) ln(1-p) is the binary entropy; for a data set of n records and all of its
neighbours (n - 1 or n + 1 records) the sensitivity is h_b(1/n) <= (1 + ln n)/n. Replacing one
record (the paper's Lemma 1 setting) moves one count down and another up; by the same argument on
g(x) = x ln x - (x-1) ln(x-1), increasing, the change is (g(a) - g(b))/n with a + b <= n + 1,
largest at a = n, b = 1: again h_b(1/n). ``tests/plaindata/plausible/test_entropy.py`` checks both by
enumerating every histogram of small n. Joint entropies (pairs of attributes) are entropies of a histogram
over the pairs and have the same sensitivity.

**The record count (equation 10).** The sensitivity depends on n, which is private. n is
released once as n_hat = n + Lap(1/eps_n) and the scales use the one-sided lower bound
n_low = n_hat - ln(1/(2 delta_n))/eps_n: P(n_low > n) = P(Lap(1/eps_n) > ln(1/(2 delta_n))/eps_n)
= delta_n, and when n_low <= n the scale h_b(1/n_low)/eps is at least the true sensitivity over eps
(h_b(1/x) decreases for x >= 2). The count costs (eps_n, 0) and the bound adds delta_n.
"""

from __future__ import annotations

import math

import numpy as np


def entropy(codes: np.ndarray) -> float:
    """Empirical entropy (nats) of the rows of ``codes`` (one column or several, jointly)."""
    codes = np.asarray(codes)
    if codes.ndim == 1:
        codes = codes[:, None]
    if len(codes) == 0:
        return 0.0
    _, counts = np.unique(codes, axis=0, return_counts=True)
    return histogram_entropy(counts)


def histogram_entropy(counts: np.ndarray) -> float:
    counts = np.asarray(counts, dtype=float)
    counts = counts[counts > 0]
    n = counts.sum()
    if n == 0:
        return 0.0
    return float(math.log(n) - (counts * np.log(counts)).sum() / n)


def binary_entropy(p: float) -> float:
    if p <= 0 or p >= 1:
        return 0.0
    return -p * math.log(p) - (1 - p) * math.log1p(-p)


def entropy_sensitivity(n: float) -> float:
    """Sensitivity of the empirical entropy of a data set of n records (derived above): h_b(1/n)."""
    return binary_entropy(1.0 / max(float(n), 2.0))


def count_lower_bound(noisy_count: float, epsilon_count: float, delta_count: float) -> float:
    """n_low with P(n_low > n) = delta_count, from n_hat = n + Lap(1/epsilon_count)."""
    if not 0 < delta_count < 0.5:
        raise ValueError("delta for the record count must lie in (0, 1/2)")
    return noisy_count - math.log(1 / (2 * delta_count)) / epsilon_count
