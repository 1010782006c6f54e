"""Privacy Tests 1 and 2 of plausible-deniability synthesis, and Theorem 1's (eps, delta).

Bindschaedler, Shokri and Gunter (VLDB 2017), Sections 2-2.1 and 5. A candidate y generated from
seed d is released only if enough records of D could plausibly have generated it. With
p_a = Pr{y = M(d_a)} for every record (one numpy vector, computed by the generative model), the
seed's partition is the integer i >= 0 with gamma^-(i+1) < p_d <= gamma^-i, i.e.
i = floor(log(1/p_d) / log gamma); the plausible seeds are the records in the same partition
(the seed itself included); records with p_a = 0 are in none.

* Test 1 (deterministic): pass if the number of plausible seeds is at least k.
* Test 2 (randomized): pass if it is at least k + Lap(1/eps0), with fresh noise for every test.
* Early stopping as in the paper's tool (Section 5): records are examined in a random order, at
  most ``max_check_plausible`` of them, and counting stops at ``max_plausible``. It changes speed
  and the pass rate, not privacy.
* Theorem 1: Mechanism 1 with Test 2 is (eps, delta)-DP for every integer 1 <= t < k, with
  eps = eps0 + ln(1 + gamma / t) and delta = exp(-eps0 (k - t)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from petlab.plaindata.dp.noise import NoiseSource, laplace_mechanism
from petlab.plaindata.secure_random import release_generator


def partitions(probabilities: np.ndarray, gamma: float) -> np.ndarray:
    """Partition index of each probability; -1 where the probability is 0."""
    if gamma <= 1:
        raise ValueError("gamma must be greater than 1")
    p = np.asarray(probabilities, dtype=float)
    if (p < 0).any() or (p > 1).any():
        raise ValueError("probabilities must lie in [0, 1]")
    out = np.full(p.shape, -1, dtype=np.int64)
    positive = p > 0
    guess = np.floor(-np.log(p[positive]) / math.log(gamma)).astype(np.int64)
    # logarithms can land a hair off an exact boundary: settle it with the defining inequalities
    guess -= (p[positive] > gamma ** (-guess.astype(float))) & (guess > 0)
    guess += p[positive] <= gamma ** (-(guess + 1.0))
    out[positive] = guess
    return out


def count_plausible_seeds(
    probabilities: np.ndarray,
    seed: int,
    gamma: float,
    max_plausible: int | None = None,
    max_check_plausible: int | None = None,
    rng: np.random.Generator | None = None,
) -> int:
    """Plausible seeds of a candidate generated from record ``seed`` (one vectorised pass)."""
    parts = partitions(probabilities, gamma)
    if parts[seed] < 0:
        raise ValueError("the candidate has probability 0 under its own seed")
    matches = parts == parts[seed]
    if max_check_plausible is not None and max_check_plausible < len(matches):
        order = (rng or release_generator()).permutation(len(matches))[:max_check_plausible]
        matches = matches[order]
    count = int(matches.sum())
    return count if max_plausible is None else min(count, max_plausible)


def privacy_test_1(count: int, k: int) -> bool:
    return count >= k


def privacy_test_2(count: int, k: int, eps0: float, noise: NoiseSource | None = None) -> bool:
    threshold = float(laplace_mechanism(np.array([float(k)]), 1.0, eps0, noise)[0])
    return count >= threshold


@dataclass(frozen=True)
class Theorem1:
    epsilon: float
    delta: float
    t: int


def theorem1(k: int, gamma: float, eps0: float, t: int) -> Theorem1:
    if not (isinstance(t, int) and 1 <= t < k):
        raise ValueError(f"t must be an integer with 1 <= t < k = {k}")
    if gamma <= 1 or eps0 <= 0:
        raise ValueError("gamma must exceed 1 and eps0 be positive")
    return Theorem1(eps0 + math.log(1 + gamma / t), math.exp(-eps0 * (k - t)), t)


def privacy_test_1_batch(counts: np.ndarray, k: int) -> np.ndarray:
    return np.asarray(counts) >= k


def privacy_test_2_batch(
    counts: np.ndarray, k: int, eps0: float, noise: NoiseSource | None = None
) -> np.ndarray:
    """Test 2 for many candidates at once, a fresh Lap(1/eps0) threshold for each."""
    counts = np.asarray(counts)
    thresholds = laplace_mechanism(np.full(counts.shape, float(k)), 1.0, eps0, noise)
    return counts >= thresholds


def default_t(k: int, eps0: float, delta_target: float) -> int:
    """The largest t in 1..k-1 with Theorem 1's delta = exp(-eps0 (k - t)) <= delta_target (the
    smallest eps at that delta); 1 when no t reaches the target."""
    if k < 2:
        raise ValueError("Theorem 1 needs k >= 2")
    best = math.floor(k + math.log(delta_target) / eps0)
    return int(min(k - 1, max(1, best)))
