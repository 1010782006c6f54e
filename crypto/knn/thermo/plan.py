"""The integer plan of the thermometer family: distances with no lookup, per-class top-k lists.

The fast family (``crypto.knn.fast.plan``) spends most of its lookups on distances: one per
(feature, distinct training value) and, for high d, a 7-bit coarsening per point. Here the client
sends its query as a thermometer code (``crypto.knn.thermo.encoding``: bits ``[q_f >= t]``), so any
per-feature function of the query is a clear linear combination of encrypted bits. The integer
algorithm (the encrypted class equals ``crypto.knn.thermo.reference`` on every query):

1. Per-feature coarse cost from a public table (no training data in it; :class:`DistanceSpec`):
   ``g(q, v) = min(floor((q - v)^2 / scale), cap)``. By the telescoping sum
   ``g(q, v) = g(0, v) + sum_t (g(t, v) - g(t - 1, v)) [q >= t]`` the raw distance of point i is
   ``raw_i = code @ weights[:, i] + offsets[i]``: a clear matrix product, **no PBS**.
2. If ``raw`` can exceed ``distance_max = 2^w - 2`` (or ``shift > 0``), one reduction per point:
   ``D_i = min(raw_i >> shift, distance_max)``, exact: ``fhe.truncate_bit_pattern`` removes the
   ``shift`` low bits (one small PBS each), then one lookup of ``raw_bits - shift`` bits saturates.
   Otherwise ``D_i = raw_i`` (no PBS at all before the comparisons).
3. Per-class selection network (``crypto.knn.thermo.network``): the k smallest distances of every
   class, ascending, then D_k, the k-th smallest distance overall, from those C lists. One
   compare-exchange is ONE lookup of ``w + 1`` bits: ``m(t) = min(t, 0)`` of ``t = a - b``,
   ``min = b + m``, ``max = a - m``. A class with fewer than k points is padded with
   ``filler = 2^w - 1``, larger than every distance, so it never lowers D_k and never votes.
4. Votes, tie rule "capped": ``votes_c = #{j : a_cj <= D_k}`` over the class's sorted list, i.e.
   every point at distance <= D_k votes (all ties at D_k, as R's ``class::knn(use.all = TRUE)``),
   but each class counts at most k of them. C k lookups instead of n.
   When C <= k the first entry of each list needs no indicator (:func:`counted_positions`): the
   winner of ``max(votes_c - 1, 0)`` is the winner of ``votes_c``.
5. Winner: most votes, the smallest class index among equal votes: pairwise bits
   ``[votes_c >= votes_c']`` from the sign of ``votes_c' - votes_c - 1`` (``w + 1`` is enough: votes
   are at most k); C = 2: ``class = 1 - bit``; C = 3: one lookup of the three packed bits;
   C > 3: ``win_c = [wins_c == C - 1]`` (C small lookups), ``class = sum_c c win_c``.

Cost (lookups per query, k = 3): about 2 n comparators (``network``), n reductions when
``reduced`` (plus ``shift`` truncation PBS per point), 2 C indicators when C <= 3 (else 3 C), and
C(C-1)/2 (+ 1 or C) for the winner. Iris at n = 40 (d = 4, no reduction): 87 + 6 + 4 = 97
lookups of <= 5 bits; the fast family needs 205.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from petlab.crypto.knn.paper.plan import build_plan as validate_training_set
from petlab.crypto.knn.ranges import TrainingLevels
from petlab.crypto.knn.thermo.encoding import code_length
from petlab.crypto.knn.thermo.network import MergeProgram, whole_program


@dataclass(frozen=True)
class DistanceChoice:
    """The data owner's public choice of distance (``KnnSettings.distance``): the per-feature
    table ``min(floor((q - v)^2 / scale), cap)`` and the width of the reduction lookup."""

    scale: int
    cap: int
    lookup_bits: int = 5
    distance_bits: int = 4  # 3: 4-bit comparisons (cheaper), distances 0..6

    def __post_init__(self) -> None:
        if self.scale < 1 or self.cap < 1:
            raise ValueError("the distance's scale and cap must be positive")
        if not 3 <= self.lookup_bits <= 7:
            raise ValueError(f"lookup_bits must be between 3 and 7, got {self.lookup_bits}")
        if not 2 <= self.distance_bits <= 5:
            raise ValueError(f"distance_bits must be between 2 and 5, got {self.distance_bits}")

    @classmethod
    def parse(cls, text: str) -> DistanceChoice:
        """``"SCALE,CAP"``, ``"SCALE,CAP,LOOKUP_BITS"`` or ``"SCALE,CAP,LOOKUP_BITS,DISTANCE_BITS"``
        (a command-line flag's value)."""
        try:
            values = [int(part) for part in text.split(",")]
            return cls(*values)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"--distance takes SCALE,CAP[,LOOKUP_BITS] (integers), got {text!r}: {exc}"
            ) from None


@dataclass(frozen=True)
class DistanceSpec:
    """Public parameters of the coarse distance (steps 1-2): (d, bits) and the owner's
    :class:`DistanceChoice`, never the training data."""

    d: int
    bits: int
    scale: int
    cap: int
    lookup_bits: int = 5
    distance_bits: int = 4  # w: distances 0..2^w - 2, the filler 2^w - 1

    def __post_init__(self) -> None:
        DistanceChoice(self.scale, self.cap, self.lookup_bits, self.distance_bits)  # the same checks
        if self.d < 1:
            raise ValueError("d must be at least 1")

    @property
    def levels(self) -> int:
        return 1 << self.bits

    @property
    def distance_max(self) -> int:
        return (1 << self.distance_bits) - 2

    @property
    def filler(self) -> int:
        return (1 << self.distance_bits) - 1

    @property
    def feature_max(self) -> int:
        """Largest per-feature cost of a well-formed code."""
        return int(self.table().max())

    @property
    def raw_max(self) -> int:
        return self.d * self.feature_max

    @property
    def raw_bits(self) -> int:
        return max(1, self.raw_max.bit_length())

    @property
    def reduced(self) -> bool:
        """Whether step 2 runs: only when raw distances can exceed ``distance_max``."""
        return self.raw_max > self.distance_max

    @property
    def shift(self) -> int:
        """Low bits truncated before the reduction lookup, so that it reads ``lookup_bits`` bits."""
        return max(0, self.raw_bits - self.lookup_bits) if self.reduced else 0

    @property
    def compare_bits(self) -> int:
        """Width of ``a + filler - b`` in [0, 2 filler] for two distances (fillers included):
        every comparator's and indicator's lookup input (the circuit keeps lookup inputs unsigned)."""
        return (2 * self.filler).bit_length()

    def table(self) -> np.ndarray:
        """``g[q, v]`` for every pair of levels."""
        levels = np.arange(self.levels)
        squares = (levels[:, None] - levels[None, :]) ** 2
        return np.minimum(squares // self.scale, self.cap).astype(np.int64)

    def reduce(self, raw: np.ndarray) -> np.ndarray:
        """Step 2 on clear raw distances (identity when not ``reduced``)."""
        if not self.reduced:
            return np.asarray(raw, dtype=np.int64)
        return np.minimum(np.asarray(raw, dtype=np.int64) >> self.shift, self.distance_max)

    def reduction_table(self) -> list[int]:
        """The saturating lookup, indexed by the raw value (its low ``shift`` bits already zero)."""
        return [int(v) for v in self.reduce(np.arange(1 << self.raw_bits))]


def default_choice(d: int, bits: int) -> DistanceChoice:
    """The distance a data owner gets without choosing one (public: d and bits only).

    Few features (``d <= 4``): cap ``14 // d`` (at most 3), so raw distances fit 4 bits and step 2
    never runs, and a cost that saturates near a level difference of a fifth of the range.
    More features: cap 3 at the same saturation, reduction read at 5 bits. Measured over ten
    splits (docs/explanation/knn-circuits.md, "Accuracy and the owner settings"): within a point
    of float k-NN on iris, wine (3 bits) and
    breast_cancer; digits needs its owner's choice (scale 16, cap 6, 6-bit lookup)."""
    cap = min(3, max(1, 14 // d)) if d <= 4 else 3
    top = (1 << bits) - 1
    scale = max(1, round((SATURATION * top) ** 2 / cap))
    return DistanceChoice(scale=scale, cap=cap, lookup_bits=5)


def spec_for(d: int, bits: int, choice: DistanceChoice | None = None) -> DistanceSpec:
    choice = choice or default_choice(d, bits)
    return DistanceSpec(
        d=d,
        bits=bits,
        scale=choice.scale,
        cap=choice.cap,
        lookup_bits=choice.lookup_bits,
        distance_bits=choice.distance_bits,
    )


def default_spec(d: int, bits: int) -> DistanceSpec:
    return spec_for(d, bits)


SATURATION = 0.2  # the per-feature cost caps near this fraction of the level range


def counted_positions(n_classes: int, k: int) -> range:
    """Positions j of the class lists whose indicator ``[a_cj <= D_k]`` the vote reads (step 4).

    All k, except when ``C <= k``: then position 0 is left out, and each class counts
    ``v'_c = max(v_c - 1, 0)`` (the lists are ascending, so ``a_c1 <= D_k`` implies
    ``a_c0 <= D_k``). The first class with the most votes is the same for v' as for v: at least k
    points lie at distance <= D_k and a class counts its own up to k, so the votes sum to at
    least k. If the largest vote M is >= 2, the classes with v = M are exactly those with
    v' = M - 1 >= 1 and every other class has v' < M - 1. If M <= 1, the votes are C ones summing
    to at least k >= C, so all are 1, every v' is 0 and both winners are class 0.
    (``tests/crypto/knn/test_thermo_knn.py`` checks every vote vector.)"""
    return range(1, k) if n_classes <= k else range(k)


@dataclass(frozen=True)
class ThermoPlan(TrainingLevels):
    """Clear constants of the thermometer circuit (module docstring gives the algorithm)."""

    train: np.ndarray  # (n, d) quantized training points
    labels: np.ndarray  # (n,)
    n_classes: int
    k: int
    bits: int
    spec: DistanceSpec
    weights: np.ndarray  # (d (2^bits - 1), n): raw = code @ weights + offsets
    offsets: np.ndarray  # (n,)
    program: MergeProgram  # per-class lists and D_k

    @property
    def code_length(self) -> int:
        return code_length(self.d, self.bits)

    @property
    def vote_slots(self) -> list[tuple[int, int]]:
        """(class, slot) of every list entry the vote counts (:func:`counted_positions`; fillers,
        decided at build time, never count)."""
        counted = counted_positions(self.n_classes, self.k)
        return [
            (c, s)
            for c, slots in enumerate(self.program.lists)
            for j, s in enumerate(slots)
            if j in counted and s is not None
        ]

    @property
    def vote_gap_bits(self) -> int:
        """Width of ``votes_c' - votes_c + k``, in [0, 2k] (votes are 0..k): the offset sign test."""
        return max(1, (2 * self.k).bit_length())


def distance_weights(train: np.ndarray, spec: DistanceSpec) -> tuple[np.ndarray, np.ndarray]:
    """``weights`` (d (L - 1), n) and ``offsets`` (n,) with ``raw = code @ weights + offsets``
    (step 1's telescoping sum)."""
    table = spec.table()
    steps = table[1:, :] - table[:-1, :]  # row t - 1: g(t, v) - g(t - 1, v)
    n, d = train.shape
    top = spec.levels - 1
    weights = np.zeros((d * top, n), dtype=np.int64)
    for f in range(d):
        weights[f * top : (f + 1) * top, :] = steps[:, train[:, f]]
    offsets = table[0, train].sum(axis=1).astype(np.int64)
    return weights, offsets


def build_thermo_plan(
    train: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    k: int,
    bits: int,
    spec: DistanceSpec | None = None,
    distance: DistanceChoice | None = None,
) -> ThermoPlan:
    """Check the quantized training set and derive the circuit's clear constants (``spec``, or
    the owner's ``distance`` choice, or :func:`default_choice` of (d, bits))."""
    checked = validate_training_set(train, labels, n_classes, k, bits)
    train, labels = checked.train, checked.labels
    spec = spec or spec_for(train.shape[1], bits, distance)
    if (spec.d, spec.bits) != (train.shape[1], bits):
        raise ValueError(f"the distance spec is for d = {spec.d}, {spec.bits} bits; the data differ")
    weights, offsets = distance_weights(train, spec)
    return ThermoPlan(
        train=train,
        labels=labels,
        n_classes=int(n_classes),
        k=int(k),
        bits=int(bits),
        spec=spec,
        weights=weights,
        offsets=offsets,
        program=whole_program(labels, n_classes, k),
    )
