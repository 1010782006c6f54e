"""Exact linear algebra modulo a random prime, for the release audit (``release_audit``).

The audit decides whether a vector lies in the row space of the released functionals. Over the
rationals that is exact but slow (fraction-free elimination on 2,000 x 100,000 integers); in floating
point it is fast but wrong (a relative cut-off on singular values drops the direction that exposes a
record once the family is ill-conditioned). Here everything is computed over the field
F_p, p a prime drawn uniformly from [2^30, 2^31) by the operating system's CSPRNG, with integers
only: every decision is exact over F_p.

Error bound (what can go wrong, and how rarely). Let M be the released matrix (integer entries after
clearing each row's dyadic denominator), r its rank over Q, and Delta != 0 an r x r minor of it. By
Cramer's rule every vector of the rational row space is y^T M_I with denominators dividing Delta,
so when p does not divide Delta, reduction mod p keeps the rank and every vector that lies in the
row space over Q lies in it over F_p: the audit can then refuse too much (a vector in the span mod
p only; never a problem for privacy) but never too little. Hadamard's inequality bounds
|Delta| <= prod_i ||M_i||_2 over the rows, so log2 |Delta| <= B := sum of log2 ||M_i||_2 (for 0/1
rows over N records at most (r/2) log2 N), and Delta has at most B / 30 prime factors in
[2^30, 2^31). That interval holds more than 3.5e7 primes (Rosser and Schoenfeld 1962:
x / ln x < pi(x) < 1.25506 x / ln x for x >= 17). So, for p uniform there,

    P(the audit misses a determined group) <= B / (30 * 3.5e7) = B / 1.05e9,

e.g. 2,000 rows over 100,000 records: B <= 16,610, at most 1.6e-5; with k independent primes (a
group must be missed modulo every one of them) the k-th power: 2.5e-10 for the default k = 2.
:func:`miss_probability` computes the bound for the rows actually released.

Why [2^30, 2^31): a float64 product of a 0/1 matrix (m rows) with residues below 2^31 sums to less
than m 2^31 < 2^53 for m < 2^22, so numpy's BLAS ``@`` is exact and fast; elimination uses int64
(products below 2^62).
"""

from __future__ import annotations

import math
import secrets

import numpy as np

from petlab.server.controller.audit_clock import tick

LOW, HIGH = 1 << 30, 1 << 31
PRIMES_IN_RANGE = 35_000_000  # a lower bound on pi(2^31) - pi(2^30) (module docstring)
CHUNK = 2048  # columns per float64 block in the products with 0/1 matrices
PANEL = 64  # pivots per panel of the blocked elimination
WINDOW = 512  # columns searched for a panel's pivots


def is_prime(n: int) -> bool:
    """Miller-Rabin with the bases 2, 3, 5, 7: deterministic below 3,215,031,751 > 2^31."""
    if n < 2:
        return False
    for q in (2, 3, 5, 7):
        if n % q == 0:
            return n == q
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def random_prime(rng: np.random.Generator | None = None) -> int:
    """A prime uniform among those in [2^30, 2^31): from ``secrets`` (production), or from ``rng``
    (tests, reproducible)."""
    while True:
        offset = secrets.randbelow(HIGH - LOW) if rng is None else int(rng.integers(0, HIGH - LOW))
        if is_prime(LOW + offset):
            return LOW + offset


def miss_probability(log2_norms: float, primes: int) -> float:
    """The module docstring's bound on missing a determined group, for released rows whose
    Euclidean norms' log2 sum to ``log2_norms``, audited modulo ``primes`` independent primes."""
    per_prime = min(1.0, max(log2_norms, 1.0) / 30 / PRIMES_IN_RANGE)
    return per_prime**primes


def row_log2_norm(weights: np.ndarray) -> float:
    """log2 of a row's Euclidean norm (weights over the records, already integers)."""
    total = float(np.sum(np.square(weights.astype(np.float64))))
    return 0.5 * math.log2(total) if total > 0 else 0.0


def rref(matrix: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Reduced row echelon form mod p (entries in [0, p)) and the pivot columns, left to right.

    Blocked Gauss-Jordan: the columns go in panels of at most ``PANEL`` pivots (found in windows of
    ``WINDOW`` columns); a panel's pivots (columns, and rows independent on them, B the k x k
    block) come from :func:`rref_simple` on the panel alone,
    then every row is updated at once with two exact products (:func:`matmul`, float64 BLAS):
    the pivot rows become B^-1 A_R, every other row o loses A[o, pivots] B^-1 A_R. A row below the
    pivots lies in their span on the panel, so its panel part vanishes; the rows above lose their
    entries in the new pivot columns, as RREF requires. Small matrices go to
    :func:`rref_simple`."""
    a = np.array(matrix, dtype=np.int64) % p
    rows, cols = a.shape
    if rows < 2 * PANEL or cols < 4 * PANEL:
        return rref_simple(a, p)
    pivots: list[int] = []
    r, c = 0, 0
    while r < rows and c < cols:
        tick()
        end = min(c + WINDOW, cols)
        _, local = rref_simple(a[r:, c:end], p)
        if not len(local):
            c = end
            continue
        if len(local) > PANEL:  # a panel holds PANEL pivots; the columns after them wait
            local = local[:PANEL]
            end = c + int(local[-1]) + 1
        panel = a[r:, c:end]
        _, chosen_local = rref_simple(np.ascontiguousarray(panel[:, local].T), p)
        chosen, columns = r + chosen_local, c + local
        block = a[np.ix_(chosen, columns)]
        inverse = rref_simple(np.concatenate([block, np.eye(len(chosen), dtype=np.int64)], axis=1), p)[0]
        top = matmul(inverse[:, len(chosen) :], a[chosen, c:], p)
        others = np.setdiff1d(np.arange(rows), chosen)
        a[others, c:] = (a[others, c:] - matmul(a[np.ix_(others, columns)], top, p)) % p
        rest = np.setdiff1d(np.arange(r, rows), chosen)
        a[r + len(chosen) :] = a[rest]
        a[r : r + len(chosen)] = 0
        a[r : r + len(chosen), c:] = top
        pivots += columns.tolist()
        r += len(chosen)
        c = end
    return a[:r], np.asarray(pivots, dtype=np.int64)


def rref_simple(matrix: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rref` one pivot at a time. A pivot row is zero left of its pivot, so each elimination
    touches the columns from the pivot on; f * a_r < 2^62 and a - f * a_r > -2^62 stay in int64
    before the one reduction mod p."""
    a = np.array(matrix, dtype=np.int64) % p
    rows, cols = a.shape
    pivots: list[int] = []
    r, c = 0, 0
    while r < rows and c < cols:
        if not r % 64:
            tick()
        nonzero = np.flatnonzero(a[r:, c])
        if not len(nonzero):
            rest = np.flatnonzero(a[r:, c:].any(axis=0))  # skip a run of zero columns at once
            if not len(rest):
                break
            c += int(rest[0])
            continue
        k = r + int(nonzero[0])
        if k != r:
            a[[r, k]] = a[[k, r]]
        a[r, c:] = a[r, c:] * pow(int(a[r, c]), p - 2, p) % p
        factors = a[:, c].copy()
        factors[r] = 0
        others = np.flatnonzero(factors)
        if len(others):
            a[others, c:] = (a[others, c:] - factors[others, None] * a[r, c:][None, :]) % p
        pivots.append(c)
        r += 1
        c += 1
    return a[:r], np.asarray(pivots, dtype=np.int64)


def left_null_space(matrix: np.ndarray, p: int) -> np.ndarray:
    """A basis (rows) of {y : y^T matrix = 0} mod p."""
    m = matrix.shape[0]
    if matrix.shape[1] == 0:
        return np.eye(m, dtype=np.int64)
    reduced, pivots = rref(np.ascontiguousarray(matrix.T), p)
    is_pivot = np.zeros(m, dtype=bool)
    is_pivot[pivots] = True
    free = np.flatnonzero(~is_pivot)
    basis = np.zeros((len(free), m), dtype=np.int64)
    basis[np.arange(len(free)), free] = 1
    if len(pivots):
        basis[:, pivots] = (-reduced[:, free].T) % p
    return basis


def matmul(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """(a @ b) mod p for residues in [0, p), exactly, with as few float64 BLAS products as the
    entries allow. The left factor is centred to (-p/2, p/2]; the right one is used whole when
    max|a| max(b) times the inner dimension stays below 2^53 (a raw released form: 0/1 or small
    integer weights, times residues), else split into 2 limbs of 16 bits or 3 of 11 bits, the inner
    dimension cut into runs short enough that every float64 partial sum stays below 2^53
    (2 limbs: runs of 128 = 2^53 / (2^30 2^16); 3 limbs: runs of 4,096), whichever needs the
    fewest products. Output columns go in blocks of ``CHUNK``
    (one :func:`tick` each)."""
    left = np.asarray(a, dtype=np.int64) % p
    right = np.asarray(b, dtype=np.int64) % p
    rows, inner = left.shape
    out = np.zeros((rows, right.shape[1]), dtype=np.int64)
    if not rows or not inner or not right.shape[1]:
        return out
    left = np.where(left > p // 2, left - p, left)
    a_max, b_max = max(int(np.abs(left).max()), 1), max(int(right.max()), 1)
    left_float = left.astype(np.float64)
    exact = (1 << 53) - 1
    plans = []  # (products, limbs, width, run): the fewest BLAS products, then the fewest limbs
    for limbs in (1, 2, 3):
        width = 31 if limbs == 1 else -(-31 // limbs)
        run = exact // (a_max * (b_max if limbs == 1 else (1 << width) - 1))
        if run:
            plans.append((limbs * -(-inner // run), limbs, width, run))
    _, limbs, width, run = min(plans)
    mask = (1 << width) - 1
    for column in range(0, right.shape[1], CHUNK):
        block = right[:, column : column + CHUNK]
        total = np.zeros((rows, block.shape[1]), dtype=np.int64)
        for limb in range(limbs):
            part = ((block >> (limb * width)) & mask).astype(np.float64)
            acc = np.zeros_like(total)
            for start in range(0, inner, run):
                tick()
                product = left_float[:, start : start + run] @ part[start : start + run]
                acc = (acc + product.astype(np.int64) % p) % p
            total = (total + acc * pow(2, limb * width, p)) % p
        out[:, column : column + CHUNK] = total
    return out


def times_bits(coefficients: np.ndarray, bits: np.ndarray, p: int) -> np.ndarray:
    """coefficients (k x m, residues < 2^31) times a 0/1 matrix (m x n, any integer dtype) mod p,
    exactly (float64 sums below m 2^31 < 2^53), in blocks of ``CHUNK`` columns."""
    if bits.shape[0] >= 1 << 22:
        raise ValueError("more than 2^22 rows: float64 sums would no longer be exact")
    left = np.asarray(coefficients, dtype=np.float64)
    out = np.empty((left.shape[0], bits.shape[1]), dtype=np.int64)
    for start in range(0, bits.shape[1], CHUNK):
        tick()
        block = bits[:, start : start + CHUNK].astype(np.float64)
        out[:, start : start + CHUNK] = (left @ block).astype(np.int64) % p
    return out


def residues(values: np.ndarray, p: int) -> tuple[np.ndarray, int]:
    """Exact residues mod p of float64 values, and the log2 of their common denominator. Each
    value is a dyadic rational n 2^-e, so its residue is n (2^e)^-1 mod p (p is odd); the row with
    the common denominator cleared is the integer row that the Hadamard bound is about."""
    distinct, inverse = np.unique(np.asarray(values, dtype=np.float64), return_inverse=True)
    out = np.empty(len(distinct), dtype=np.int64)
    log2_denominator = 0
    for i, value in enumerate(distinct):
        if not math.isfinite(value):
            raise ValueError("a weight is not finite")
        numerator, denominator = float(value).as_integer_ratio()
        out[i] = numerator % p * pow(denominator, p - 2, p) % p
        log2_denominator = max(log2_denominator, denominator.bit_length() - 1)
    return out[inverse], log2_denominator
