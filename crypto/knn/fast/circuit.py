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


def circuit_function(plan: FastKnnPlan, config: CircuitConfig) -> Callable:
    """The traced function: encrypted query levels (d,) -> encrypted class index."""
    selector, matrix, onehot = plan.selector(), plan.lookup_matrix, plan.onehot
    costs = fhe.LookupTable([fhe.LookupTable(row.tolist()) for row in plan.cost_tables()])
    coarse = fhe.LookupTable(coarsen_table(plan.scale).tolist()) if plan.scale.coarsened else None
    width, top = plan.compare_bits, plan.scale.distance_max
    negative_part = fhe.univariate(lambda t: np.minimum(t, 0))
    at_most_zero = fhe.univariate(lambda t: (t <= 0).astype(np.int64))
    diff, win, offsets = pair_matrices(plan.n_classes)
    vote_bits, n_classes, k = plan.vote_bits, plan.n_classes, plan.k
    removed = max(0, vote_bits - config.sign_bits)
    is_winner = fhe.univariate(lambda w: (w == n_classes - 1).astype(np.int64))
    wins_bits = signed_bit_width(-(n_classes - 1), n_classes - 1)

    def exchange(a, b):
        m = negative_part(fhe.hint(a - b, bit_width=width))
        # a - m rather than a + b - low: each output adds one lookup's noise to one input's
        return fhe.hint(b + m, bit_width=width), fhe.hint(a - m, bit_width=width)

    def knn(q):
        levels = q @ selector
        raw = costs[levels] @ matrix
        dist = coarse[fhe.hint(raw, bit_width=plan.scale.raw_max.bit_length())] if coarse else raw
        dist = fhe.hint(dist, bit_width=width)
        kth = kth_smallest(
            dist,
            k,
            pad=lambda count: fhe.zeros((count,)) + top,
            exchange=exchange,
            minimum=lambda a, b: exchange(a, b)[0],
            maximum=lambda a, b: exchange(a, b)[1],
        )
        inside = at_most_zero(fhe.hint(dist - kth, bit_width=width))
        votes = inside @ onehot
        gaps = fhe.hint(votes @ diff - 1, bit_width=vote_bits)
        if removed:
            gaps = fhe.truncate_bit_pattern(gaps, removed)
        beats = gaps < 0
        wins = fhe.hint(beats @ win + offsets, bit_width=wins_bits)
        # a dot product with np.arange simulated wrongly here (concrete 2.11); sum of products is right
        return np.sum(is_winner(wins) * np.arange(n_classes))

    return knn


def compile_fast_circuit(plan: FastKnnPlan, config: CircuitConfig, simulation: bool = False) -> fhe.Circuit:
    """Compile the fast circuit; with ``simulation`` it can also be run with ``circuit.simulate``."""
    compiler = fhe.Compiler(circuit_function(plan, config), {"q": "encrypted"})
    return compiler.compile(compile_inputset(plan), config.concrete_configuration(simulation))
