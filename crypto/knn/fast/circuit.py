"""The fast exact k-NN circuit, compiled with concrete-python from a :class:`FastKnnPlan`.

Steps and cost model are in ``crypto.knn.fast.plan``; the clear twin is ``crypto.knn.fast.reference``.
Circuit-specific choices:

- Per-feature costs: the query levels are repeated once per (feature, distinct value) by a clear
  0/1 matrix product, then one *multi-table* ``fhe.LookupTable`` applies each lookup's own table.
- Compare-exchange: ``low = b + m(a - b)``, ``high = a - m(a - b)``, ``m(t) = min(t, 0)``.
- ``fhe.hint`` pins every distance and difference to ``compare_bits`` (signed), so no query,
  however unusual, can overflow a value the input set did not reach.
- Vote comparison: exact ``fhe.truncate_bit_pattern`` down to ``sign_bits`` then ``< 0`` (as the
  paper circuit does), because votes can be wider than 5 bits.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from concrete import fhe

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.fast.plan import FastKnnPlan, coarsen_table, pair_matrices
from petlab.crypto.knn.fast.selection_network import kth_smallest
from petlab.crypto.knn.ranges import compile_inputset, signed_bit_width


def distance_function(plan: FastKnnPlan) -> Callable:
    """Steps 1-2 on encrypted query levels (d,): the (n,) coarse distances to ``plan``'s points."""
    selector, matrix = plan.selector(), plan.lookup_matrix
    costs = fhe.LookupTable([fhe.LookupTable(row.tolist()) for row in plan.cost_tables()])
    coarse = fhe.LookupTable(coarsen_table(plan.scale).tolist()) if plan.scale.coarsened else None
    width = plan.compare_bits

    def distances(q):
        raw = costs[fhe.hint(q @ selector, bit_width=plan.bits)] @ matrix
        dist = coarse[fhe.hint(raw, bit_width=plan.scale.raw_max.bit_length())] if coarse else raw
        return fhe.hint(dist, bit_width=width)

    return distances


def exchange_function(plan: FastKnnPlan) -> Callable:
    """One compare-exchange = one lookup: ``(a, b) -> (min, max)`` elementwise, for a and b in
    ``[0, distance_max]``. The lookup reads ``a - b + distance_max``, never negative: concrete
    takes a lookup input's signedness from the values the input set produced, and builds the table
    for that signedness over the hinted width. Were ``a - b`` read directly, a comparator whose
    operands the input set only ever saw in one order would get an unsigned table, constant
    (``min(t, 0) = 0``), which concrete drops: in a split partition about
    2 % of all queries would then get an unsorted k-list. Shifted, the table is right for every value."""
    width, top = plan.compare_bits, plan.scale.distance_max
    negative_part = fhe.univariate(lambda u: np.minimum(u - top, 0))

    def exchange(a, b):
        m = negative_part(fhe.hint(a - b + top, bit_width=width))
        # a - m rather than a + b - low: each output adds one lookup's noise to one input's
        return fhe.hint(b + m, bit_width=width), fhe.hint(a - m, bit_width=width)

    return exchange


def within_function(plan: FastKnnPlan) -> Callable:
    """Step 4: ``(dist, kth) -> [dist <= kth]`` elementwise (one lookup per point), reading the
    never-negative ``dist - kth + distance_max`` (see :func:`exchange_function`)."""
    width, top = plan.compare_bits, plan.scale.distance_max
    at_most_top = fhe.univariate(lambda u: (u <= top).astype(np.int64))
    return lambda dist, kth: at_most_top(fhe.hint(dist - kth + top, bit_width=width))


def decision_function(plan: FastKnnPlan, config: CircuitConfig) -> Callable:
    """Step 5: encrypted votes (C,) -> encrypted class index. The sign of ``votes_c' - votes_c - 1``
    is read from its shift by ``2^(vote_bits - 1)``, never negative (see :func:`exchange_function`),
    and the truncated value keeps the full width by a hint (a table built for a narrower width
    than the value can take would be wrong beyond it)."""
    diff, win, offsets = pair_matrices(plan.n_classes)
    vote_bits, n_classes = plan.vote_bits, plan.n_classes
    half = 1 << (vote_bits - 1)
    removed = max(0, vote_bits - config.sign_bits)
    is_winner = fhe.univariate(lambda w: (w == n_classes - 1).astype(np.int64))
    wins_bits = signed_bit_width(-(n_classes - 1), n_classes - 1)

    def decide(votes):
        shifted = fhe.hint(votes @ diff - 1 + half, bit_width=vote_bits)  # in [0, 2 half)
        if removed:
            shifted = fhe.hint(fhe.truncate_bit_pattern(shifted, removed), bit_width=vote_bits)
        beats = shifted < half  # [votes_c' - votes_c - 1 < 0]; half is a multiple of 2^removed
        wins = fhe.hint(beats @ win + offsets, bit_width=wins_bits)
        # a dot product with np.arange simulated wrongly here (concrete 2.11); sum of products is right
        return np.sum(is_winner(wins) * np.arange(n_classes))

    return decide


def network_operations(plan: FastKnnPlan) -> dict:
    """The selection network's operations (``selection_network``) for encrypted distances."""
    exchange, top = exchange_function(plan), plan.scale.distance_max
    return {
        "pad": lambda count: fhe.zeros((count,)) + top,
        "exchange": exchange,
        "minimum": lambda a, b: exchange(a, b)[0],
        "maximum": lambda a, b: exchange(a, b)[1],
    }


def circuit_function(plan: FastKnnPlan, config: CircuitConfig) -> Callable:
    """The traced function: encrypted query levels (d,) -> encrypted class index."""
    distances, within = distance_function(plan), within_function(plan)
    decide = decision_function(plan, config)
    network, onehot, k = network_operations(plan), plan.onehot, plan.k

    def knn(q):
        dist = distances(q)
        kth = kth_smallest(dist, k, **network)
        return decide(within(dist, kth) @ onehot)

    return knn


def compile_fast_circuit(
    plan: FastKnnPlan, config: CircuitConfig, simulation: bool = False, execution: bool = True
) -> fhe.Circuit:
    """Compile the fast circuit; with ``simulation`` it can also be run with ``circuit.simulate``
    (with ``execution=False``, only simulated)."""
    compiler = fhe.Compiler(circuit_function(plan, config), {"q": "encrypted"})
    return compiler.compile(compile_inputset(plan), config.concrete_configuration(simulation, execution))
