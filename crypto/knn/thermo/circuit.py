"""The thermometer family's circuit, compiled with concrete-python from a :class:`ThermoPlan`.

Steps and cost are in ``crypto.knn.thermo.plan``; the clear twin is ``crypto.knn.thermo.reference``
and both run the same :class:`crypto.knn.thermo.network.MergeProgram`. Circuit-specific choices:

- Distances: ``code @ weights + offsets``, a clear matrix product (no PBS).
- Reduction (when the plan's spec needs it): exact ``fhe.truncate_bit_pattern`` of the ``shift`` low
  bits, then one saturating lookup that concrete evaluates at ``raw_bits - shift`` bits.
- Compare-exchange: ``r = max(b - a, 0)`` read from ``u = a + F - b`` (F = the filler, so u is in
  [0, 2F]: unsigned), ``low = b - r``, ``high = a + r`` (one lookup per comparator, a whole layer
  at once). Operands are gathered with clear index arrays (no PBS).
- Every lookup reads an offset, unsigned value, and concrete's table trimming to the input set's
  observed range is off (``optimize_tlu_based_on_original_bit_width=False``, set for every family
  in ``crypto.knn.config.CircuitConfig``). Why: concrete types a
  value signed or unsigned from the bounds the input set reached, and trims a table to those
  bounds; a signed difference that the input set never saw negative (a comparator deep in the
  network, e.g. the last one) was typed unsigned, its table ``min(t, 0)`` became constant and the
  lookup was replaced by 0 (seen on breast_cancer, n = 10: 57 PBS instead of 58), so a query that
  makes it negative would be answered wrongly. With offsets and full tables, every lookup is
  right for every value of its hinted width, whatever the input set reached.
- ``fhe.hint`` pins distances to ``distance_bits`` and lookup inputs to ``compare_bits``.
- Fillers of classes with fewer than k points are clear at build time: their comparators and
  indicators are decided then and cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from concrete import fhe

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.fast.plan import class_pairs, pair_matrices
from petlab.crypto.knn.thermo.encoding import thermometer
from petlab.crypto.knn.thermo.plan import DistanceSpec, ThermoPlan

# a class decided by one lookup of the packed pairwise bits while there are at most this many pairs
PACKED_PAIRS = 3


def packed_winner_table(n_classes: int) -> list[int]:
    """Class index for each packing ``sum_p 2^p beats_p`` of the pairwise bits
    ``beats_p = [votes_c >= votes_c']`` (pairs p in :func:`class_pairs` order): the class that
    beats every other. Packings no vote vector produces (cyclic) map to 0."""
    first, second = class_pairs(n_classes)
    table = []
    for packing in range(1 << len(first)):
        beats = {
            (int(c), int(o)): (packing >> p) & 1 for p, (c, o) in enumerate(zip(first, second, strict=True))
        }
        winners = [
            c
            for c in range(n_classes)
            if all(beats[(c, o)] if c < o else not beats[(o, c)] for o in range(n_classes) if o != c)
        ]
        table.append(winners[0] if winners else 0)
    return table


def decision_function(n_classes: int, vote_gap_bits: int) -> Callable:
    """Step 6 on encrypted votes (C,): the class. The pairwise signs read ``votes_c' - votes_c - 1``
    shifted by ``2^(vote_gap_bits - 1)``, never negative: concrete takes a lookup input's
    signedness from the input set's values, and a table built unsigned for a value that can be
    negative is wrong (``crypto.knn.fast.circuit.exchange_function``)."""
    diff, win, win_offsets = pair_matrices(n_classes)
    n_pairs = diff.shape[1]
    half = 1 << (vote_gap_bits - 1)
    packed = (
        fhe.LookupTable(packed_winner_table(n_classes)) if n_classes > 2 and n_pairs <= PACKED_PAIRS else None
    )
    pack = 1 << np.arange(n_pairs)
    is_winner = fhe.univariate(lambda w: (w == n_classes - 1).astype(np.int64))
    wins_bits = max(1, (n_classes - 1).bit_length())  # wins_c in [0, C - 1]: classes c beats

    def decide(votes):
        beats = fhe.hint(votes @ diff - 1 + half, bit_width=vote_gap_bits) < half
        if n_classes == 2:
            return 1 - beats[0]
        if packed is not None:
            return packed[beats @ pack]
        wins = fhe.hint(beats @ win + win_offsets, bit_width=wins_bits)
        # a dot product with np.arange simulated wrongly (concrete 2.11, fast family); a sum is right
        return np.sum(is_winner(wins) * np.arange(n_classes))

    return decide


#: Prefixes of steps 1-2 (``distance_function(..., upto=...)``): the raw sums, after the exact
#: truncation, after the reduction (the circuit's distances); ``experiments/knn_stages.py`` times each
DISTANCE_STAGES = ("raw", "truncated", "reduced")


def distance_function(
    spec: DistanceSpec,
    weights: np.ndarray,
    offsets: np.ndarray,
    upto: str = "reduced",
    approximate: bool = False,
) -> Callable:
    """Steps 1-2 on an encrypted code: the points' distances (``weights`` and ``offsets``: their
    columns of the plan's, for a subset of the points). ``upto`` stops after a prefix of
    :data:`DISTANCE_STAGES` ("raw": ``code @ weights + offsets``; "truncated": its ``shift`` low
    bits cleared, still scaled by ``2^shift``); the circuit always uses "reduced".

    ``approximate`` (measurement only, ``experiments/knn_budget.py``): concrete's approximate
    rounding (``fhe.round_bit_pattern``, ``Exactness.APPROXIMATE``, folded into the reduction
    lookup: no PBS of its own) in place of the exact truncation. It rounds to nearest rather than
    down, and near every rounding boundary it may land one step off, outside the error budget:
    the distances are no longer :meth:`DistanceSpec.reduce`'s and no clear reference equals them."""
    if upto not in DISTANCE_STAGES:
        raise ValueError(f"upto must be one of {DISTANCE_STAGES}, got {upto!r}")
    reduction = fhe.LookupTable(spec.reduction_table()) if spec.reduced else None
    if approximate and spec.shift:  # its rounded input may reach 2^raw_bits: a table over it
        reduction = fhe.univariate(lambda v: np.minimum(v >> spec.shift, spec.distance_max))

    def distances(code):
        raw = fhe.hint(code @ weights + offsets, bit_width=spec.raw_bits)
        if upto == "raw":
            return raw
        if reduction is not None:
            if spec.shift and approximate:
                raw = fhe.round_bit_pattern(raw, spec.shift, exactness=fhe.Exactness.APPROXIMATE)
            elif spec.shift:
                raw = fhe.truncate_bit_pattern(raw, spec.shift)
            if upto == "truncated":
                return raw
            raw = reduction(raw) if approximate and spec.shift else reduction[raw]
        return fhe.hint(raw, bit_width=spec.distance_bits)

    return distances


def circuit_function(plan: ThermoPlan, approximate: bool = False) -> Callable:
    """The traced function: encrypted code (d (2^bits - 1),) -> encrypted class index
    (``approximate``: :func:`distance_function`'s, for measurement only)."""
    spec, program = plan.spec, plan.program
    dist_bits, cmp_bits = spec.distance_bits, spec.compare_bits
    fill = spec.filler
    shortfall = fhe.univariate(lambda u: np.maximum(fill - u, 0))  # u = a + F - b: max(b - a, 0)
    within = fhe.univariate(lambda u: (u <= fill).astype(np.int64))  # u = a + F - D_k: [a <= D_k]
    distances = distance_function(spec, plan.weights, plan.offsets, approximate=approximate)
    real = plan.vote_slots
    slots = np.asarray([s for _, s in real], dtype=np.int64)
    onehot = np.zeros((len(real), plan.n_classes), dtype=np.int64)
    onehot[np.arange(len(real)), [c for c, _ in real]] = 1
    decide = decision_function(plan.n_classes, plan.vote_gap_bits)

    def exchange(a, b):
        r = shortfall(fhe.hint(a + fill - b, bit_width=cmp_bits))
        return fhe.hint(b - r, bit_width=dist_bits), fhe.hint(a + r, bit_width=dist_bits)

    def knn(code):
        store = program.run(distances(code), exchange, lambda parts: np.concatenate(tuple(parts)))
        inside = within(fhe.hint(store[slots] + fill - store[program.kth], bit_width=cmp_bits))
        return decide(inside @ onehot)

    return knn


def compile_inputset(plan: ThermoPlan, seed: int = 0, random_queries: int = 64) -> list[np.ndarray]:
    """Codes of the training points, seeded random queries and the box's two extreme corners (the
    hints fix every width; the set only has to be representative)."""
    rng = np.random.default_rng(seed)
    levels = [*plan.train, *rng.integers(0, plan.max_level + 1, size=(random_queries, plan.d))]
    levels += [np.zeros(plan.d, dtype=np.int64), np.full(plan.d, plan.max_level)]
    return [thermometer(np.asarray(q, dtype=np.int64), plan.bits) for q in levels]


def compile_thermo_circuit(
    plan: ThermoPlan, config: CircuitConfig, simulation: bool = False, execution: bool = True
) -> fhe.Circuit:
    """Compile the circuit; with ``simulation`` it can also be run with ``circuit.simulate``
    (with ``execution=False``, only simulated)."""
    compiler = fhe.Compiler(circuit_function(plan), {"code": "encrypted"})
    return compiler.compile(compile_inputset(plan), config.concrete_configuration(simulation, execution))
