"""Per-feature min-max quantization of real features to small unsigned integers.

HE-kNN-V (Ameur et al., PSD 2022, Section 4.1, "Simulation Procedure") rescales every attribute to
[0, 1] and then to a fixed-point integer before encryption, because TFHE evaluates only integer
(torus) arithmetic. Here the scale is fitted on the training set only, and each feature is mapped to
``bits`` bits:

    q = round((x - low) / (high - low) * (2**bits - 1)),   clipped to [0, 2**bits - 1].

Queries outside the training range are *clipped* to the nearest end of the range (a value below the
training minimum becomes 0, above the maximum becomes 2**bits - 1). That keeps every encrypted input
inside the range the circuit was compiled for; a clipped query is classified as if it sat on the
boundary of the training box. A feature that is constant on the training set maps to 0.
Rounding is numpy's round-half-to-even; the clear reference and the client use this same function,
so the two never disagree about a query's integer form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_BITS = 8


@dataclass(frozen=True)
class MinMaxQuantizer:
    """Fitted per-feature scale: ``lows[f]`` maps to 0 and ``highs[f]`` to ``2**bits - 1``."""

    bits: int
    lows: tuple[float, ...]
    highs: tuple[float, ...]

    @property
    def n_features(self) -> int:
        return len(self.lows)

    @property
    def max_level(self) -> int:
        return (1 << self.bits) - 1

    @classmethod
    def fit(cls, features: np.ndarray, bits: int = 4) -> MinMaxQuantizer:
        """Fit on a 2-D array of finite training features (rows are records)."""
        if not isinstance(bits, int | np.integer) or not 1 <= bits <= MAX_BITS:
            raise ValueError(f"bits must be an integer between 1 and {MAX_BITS}, got {bits!r}")
        array = _as_feature_matrix(features, "training features")
        if array.shape[0] == 0:
            raise ValueError("cannot fit a quantizer on an empty training set")
        return cls(
            bits=int(bits),
            lows=tuple(float(v) for v in array.min(axis=0)),
            highs=tuple(float(v) for v in array.max(axis=0)),
        )

    def transform(self, features: np.ndarray) -> np.ndarray:
        """Quantize a 1-D query or a 2-D batch; out-of-range values are clipped (module docstring)."""
        array = np.asarray(features, dtype=np.float64)
        single = array.ndim == 1
        matrix = _as_feature_matrix(array.reshape(1, -1) if single else array, "features")
        if matrix.shape[1] != self.n_features:
            raise ValueError(f"expected {self.n_features} features per row, got {matrix.shape[1]}")
        lows = np.asarray(self.lows)
        spans = np.asarray(self.highs) - lows
        safe_spans = np.where(spans > 0, spans, 1.0)
        scaled = (matrix - lows) / safe_spans * self.max_level
        scaled = np.where(spans > 0, scaled, 0.0)
        levels = np.clip(np.rint(scaled), 0, self.max_level).astype(np.int64)
        return levels[0] if single else levels

    def to_dict(self) -> dict:
        return {"bits": self.bits, "lows": list(self.lows), "highs": list(self.highs)}

    @classmethod
    def from_dict(cls, data: dict) -> MinMaxQuantizer:
        try:
            bits, lows, highs = data["bits"], data["lows"], data["highs"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"quantizer description is missing a field: {exc}") from exc
        if len(lows) != len(highs):
            raise ValueError("quantizer lows and highs differ in length")
        if not all(np.isfinite(lows)) or not all(np.isfinite(highs)):
            raise ValueError("quantizer bounds must be finite")
        if any(h < lo for lo, h in zip(lows, highs, strict=True)):
            raise ValueError("quantizer has a high bound below its low bound")
        if not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
            raise ValueError(f"quantizer bits must be between 1 and {MAX_BITS}")
        return cls(bits=bits, lows=tuple(map(float, lows)), highs=tuple(map(float, highs)))


def _as_feature_matrix(features: np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(features, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array (rows x features), got shape {array.shape}")
    if array.shape[1] == 0:
        raise ValueError(f"{what} have no columns")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what} contain NaN or infinite values")
    return array
