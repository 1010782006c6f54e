"""Laplace and geometric (discrete Laplace) mechanisms, and the Laplace histogram.

Randomness. Releases use :class:`OpenDPNoise`: OpenDP's samplers draw from the OS's secure random
source and sample exactly (the continuous Laplace is sampled on the floating-point grid, then
rounded, so the low-order bits of an output carry no information about the true value). The
textbook inverse-CDF sampler ``mu - b * sign(u) * log(1 - 2|u|)`` with a double-precision ``u`` does
not: its outputs fall on a grid that depends on ``mu``, and Mironov (CCS 2012) showed that the set
of reachable outputs can reveal the input. :class:`SeededNoise` uses exactly such a numpy generator,
so that tests are reproducible; it is **not for release**, and every mechanism takes the noise
source as an argument that defaults to OpenDP.

Mechanisms (Dwork et al. 2006, recalled in Machanavajjhala et al., ICDE 2008, Sections III-IV):
``laplace_mechanism(values, sensitivity, eps)`` adds Lap(sensitivity / eps) to each value;
``geometric_mechanism`` adds two-sided geometric noise with P(k) ∝ exp(-eps |k| / sensitivity) to
integers; ``laplace_histogram`` releases histogram counts with Lap(2 / eps) noise, the paper's
"density (eps/4) exp(-eps |x| / 2)" for neighbours that differ in one record's value (one count
down, another up: L1 sensitivity 2).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import opendp.prelude as dp
from scipy.stats import binom

dp.enable_features("contrib")


class NoiseSource(Protocol):
    def laplace(self, values: np.ndarray, scale: float) -> np.ndarray: ...

    def geometric(self, values: np.ndarray, scale: float) -> np.ndarray: ...

    def noisy_max(self, scores: np.ndarray, scale: float) -> int: ...

    def binomial(self, trials: np.ndarray, p: float) -> np.ndarray: ...


class OpenDPNoise:
    """Exact samplers from OpenDP over the OS's cryptographically secure randomness."""

    def laplace(self, values: np.ndarray, scale: float) -> np.ndarray:
        values = np.asarray(values, dtype=float)
        measurement = dp.m.make_laplace(
            dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float), scale=float(scale)
        )
        return np.asarray(measurement(values.ravel().tolist()), dtype=float).reshape(values.shape)

    def geometric(self, values: np.ndarray, scale: float) -> np.ndarray:
        values = np.asarray(values, dtype=np.int64)
        measurement = dp.m.make_geometric(
            dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=float(scale)
        )
        return np.asarray(measurement(values.ravel().tolist()), dtype=np.int64).reshape(values.shape)

    def noisy_max(self, scores: np.ndarray, scale: float) -> int:
        """Report-noisy-max with exponential noise (permute-and-flip); eps = 2 * sensitivity / scale
        for sensitivity-bounded scores (OpenDP's privacy map)."""
        measurement = dp.m.make_noisy_max(
            dp.vector_domain(dp.atom_domain(T=float, nan=False)),
            dp.linf_distance(T=float),
            dp.max_divergence(),
            scale=float(scale),
        )
        return int(measurement([float(v) for v in np.asarray(scores).ravel()]))

    def binomial(self, trials: np.ndarray, p: float) -> np.ndarray:
        """Binomial(trials, p) as sums of Bernoulli trials on os.urandom bits (p resolved to
        2^-64); cost linear in the total number of trials."""
        trials = np.asarray(trials, dtype=np.int64)
        if (trials < 0).any() or not 0 <= p <= 1:
            raise ValueError("trials must be non-negative and p in [0, 1]")
        total = int(trials.sum())
        bits = np.frombuffer(os.urandom(8 * total), dtype=np.uint64)
        successes = bits < np.uint64(min(int(p * 2**64), 2**64 - 1)) if p < 1 else np.ones(total, bool)
        owner = np.repeat(np.arange(trials.size), trials.ravel())
        return (
            np.bincount(owner, weights=successes, minlength=trials.size)
            .astype(np.int64)
            .reshape(trials.shape)
        )


@dataclass
class SeededNoise:
    """Reproducible numpy noise for tests. NOT FOR RELEASE (see the module docstring)."""

    seed: int = 0
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def laplace(self, values: np.ndarray, scale: float) -> np.ndarray:
        values = np.asarray(values, dtype=float)
        return values + self.rng.laplace(0.0, scale, size=values.shape)

    def geometric(self, values: np.ndarray, scale: float) -> np.ndarray:
        """Difference of two geometric variables: P(k) ∝ exp(-|k| / scale)."""
        values = np.asarray(values, dtype=np.int64)
        p = 1.0 - np.exp(-1.0 / scale)
        return values + self.rng.geometric(p, values.shape) - self.rng.geometric(p, values.shape)

    def noisy_max(self, scores: np.ndarray, scale: float) -> int:
        """The same law as OpenDP's: argmax of scores plus Exponential(scale) noise."""
        scores = np.asarray(scores, dtype=float)
        return int(np.argmax(scores + self.rng.exponential(scale, scores.shape)))

    def binomial(self, trials: np.ndarray, p: float) -> np.ndarray:
        return self.rng.binomial(np.asarray(trials, dtype=np.int64), p)


def _scale(sensitivity: float, epsilon: float) -> float:
    if not epsilon > 0 or not np.isfinite(epsilon):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    if not sensitivity > 0 or not np.isfinite(sensitivity):
        raise ValueError(f"sensitivity must be a positive finite number, got {sensitivity}")
    return sensitivity / epsilon


def laplace_mechanism(
    values, sensitivity: float, epsilon: float, noise: NoiseSource | None = None
) -> np.ndarray:
    return (noise or OpenDPNoise()).laplace(np.asarray(values, dtype=float), _scale(sensitivity, epsilon))


def geometric_mechanism(
    values, sensitivity: float, epsilon: float, noise: NoiseSource | None = None
) -> np.ndarray:
    array = np.asarray(values)
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError("the geometric mechanism releases integers; round or use the Laplace mechanism")
    return (noise or OpenDPNoise()).geometric(array, _scale(sensitivity, epsilon))


def laplace_histogram(counts, epsilon: float, noise: NoiseSource | None = None) -> np.ndarray:
    """Dwork et al.'s histogram with Lap(2/eps) per bucket (neighbours move one record)."""
    counts = np.asarray(counts)
    if (counts < 0).any():
        raise ValueError("histogram counts must be non-negative")
    return laplace_mechanism(counts, 2.0, epsilon, noise)


def bernoulli_binomial_histogram(
    counts, keep: float, noise_trials: int, noise_probability: float, noise: NoiseSource | None = None
) -> np.ndarray:
    """The other histogram of Section III (ICDE 2008, after [14]): keep each record with
    probability ``keep`` (a Bernoulli subsample), then add Binomial(noise_trials,
    noise_probability) to every bucket. Its privacy is (eps, delta), not pure: a bucket of n + 1
    can reach n + 1 + noise_trials, which a bucket of n cannot (see
    :func:`bernoulli_binomial_delta`)."""
    counts = np.asarray(counts, dtype=np.int64)
    if (counts < 0).any():
        raise ValueError("histogram counts must be non-negative")
    if not 0 < keep <= 1 or not 0 < noise_probability < 1 or noise_trials < 1:
        raise ValueError("need 0 < keep <= 1, 0 < noise_probability < 1 and noise_trials >= 1")
    source = noise or OpenDPNoise()
    return source.binomial(counts, keep) + source.binomial(
        np.full(counts.shape, noise_trials), noise_probability
    )


def bernoulli_binomial_delta(
    epsilon: float, keep: float, noise_trials: int, noise_probability: float, max_count: int
) -> float:
    """Exact delta(eps) of :func:`bernoulli_binomial_histogram` for neighbours that add or remove
    one record, over bucket counts 0..max_count: the largest hockey-stick divergence
    sum_x max(0, P_a(x) - e^eps P_b(x)) between the output laws of counts n and n + 1, both ways.
    The output of a bucket of n is Binomial(n, keep) + Binomial(noise_trials, noise_probability)."""
    support = np.arange(max_count + noise_trials + 2)
    noise_law = binom.pmf(np.arange(noise_trials + 1), noise_trials, noise_probability)
    worst = 0.0
    previous = None
    for n in range(max_count + 2):
        law = np.convolve(binom.pmf(np.arange(n + 1), n, keep), noise_law)
        law = np.pad(law, (0, len(support) - len(law)))
        if previous is not None:
            for a, b in ((law, previous), (previous, law)):
                worst = max(worst, float(np.maximum(a - math.exp(epsilon) * b, 0.0).sum()))
        previous = law
    return worst
