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

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import opendp.prelude as dp

dp.enable_features("contrib")


class NoiseSource(Protocol):
    def laplace(self, values: np.ndarray, scale: float) -> np.ndarray: ...

    def geometric(self, values: np.ndarray, scale: float) -> np.ndarray: ...

    def noisy_max(self, scores: np.ndarray, scale: float) -> int: ...


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
