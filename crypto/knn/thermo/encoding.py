"""The client's query encoding of the thermometer family: ``[q_f >= t]`` for every feature f and
threshold t = 1 .. 2^bits - 1.

Any per-feature function of a level is linear in these bits:
``g(q) = g(0) + sum_{t=1}^{L-1} (g(t) - g(t-1)) [q >= t]`` (a telescoping sum), so the server turns
the encrypted bits into distances to its clear training points with a clear matrix product and no
programmable bootstrapping (``crypto.knn.thermo.plan``). The client sends d (2^bits - 1) bits
instead of d integers: the inputs are seed-compressed, so this costs tens of bytes per bit
(measured in docs/explanation/benchmarks.md, "k-NN cost").

A client may send any bits, not only a thermometer code (docs/explanation/knn-circuits.md,
"Malformed encodings (thermo)", states what such a query computes and what it can reveal).
"""

from __future__ import annotations

import numpy as np


def code_length(d: int, bits: int) -> int:
    """Number of encrypted bits of one query: d (2^bits - 1)."""
    return d * ((1 << bits) - 1)


def thermometer(levels: np.ndarray, bits: int) -> np.ndarray:
    """The code of one quantized query (1-D, shape ``(d (2^bits - 1),)``) or of each row of a 2-D
    batch; levels must be integers in ``[0, 2^bits - 1]``. Feature-major: bit ``f (L - 1) + t - 1``
    is ``[q_f >= t]``."""
    array = np.asarray(levels)
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError("levels must be quantized integers; use the model's quantizer first")
    if array.ndim not in (1, 2):
        raise ValueError(f"levels must be one query or a batch of queries, got shape {array.shape}")
    top = (1 << bits) - 1
    if array.size and (array.min() < 0 or array.max() > top):
        raise ValueError(f"levels must lie in [0, {top}] for {bits}-bit features")
    thresholds = np.arange(1, top + 1)
    code = (array[..., :, None] >= thresholds).astype(np.int64)
    return code.reshape(*array.shape[:-1], array.shape[-1] * top)


def levels_of(code: np.ndarray, d: int, bits: int) -> np.ndarray:
    """The levels a thermometer code stands for (its number of ones per feature); for any 0/1
    array this is the level count, whether or not the code is well-formed."""
    array = np.asarray(code, dtype=np.int64)
    top = (1 << bits) - 1
    return array.reshape(*array.shape[:-1], d, top).sum(axis=-1)


def is_thermometer(code: np.ndarray, d: int, bits: int) -> np.ndarray:
    """True where a row is a well-formed code: 0/1 values, non-increasing along each feature."""
    array = np.asarray(code, dtype=np.int64)
    top = (1 << bits) - 1
    blocks = array.reshape(*array.shape[:-1], d, top)
    binary = np.isin(blocks, (0, 1)).all(axis=(-1, -2))
    monotone = (np.diff(blocks, axis=-1) <= 0).all(axis=(-1, -2))
    return binary & monotone
