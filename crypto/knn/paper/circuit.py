"""The HE-kNN-V circuit, compiled with concrete-python from a clear
:class:`petlab.crypto.knn.paper.plan.KnnPlan`.

Ameur et al. (PSD 2022), Section 3.3, with the steps of ``crypto.knn.paper.plan``:

1. ``e = q @ pair_weights + pair_offsets``: distance differences, linear in the encrypted query
   (equation (2)); no programmable bootstrapping (PBS).
2. Delta matrix ``before = e < 0`` over the n(n-1)/2 pairs i < j. The paper's sign bootstrap is
   approximate near zero; here it is exact, because the encrypted class must equal the clear
   reference on every query. A direct sign lookup on the ~10-bit difference fails to find
   parameters (the clear weights amplify the input noise), so the low ``difference_bits -
   sign_bits`` bits are first removed with ``fhe.truncate_bit_pattern`` (exact: one small PBS per
   removed bit) and the sign is read with one ``sign_bits``-bit lookup. Truncation (floor towards
   minus infinity) keeps the sign: ``floor(e / 2^L) < 0  <=>  e < 0``.
3. Ranks by column sums (a clear {-1, 0, 1} matrix, no PBS) and the mask ``rank < k``: n lookups.
4. Votes: ``mask @ onehot(labels)`` (no PBS).
5. Encrypted argmax: a halving tournament of ``np.maximum`` over the distinct scores
   ``votes * C + (C - 1 - c)``, then one lookup turns the best score into the class index, the only
   output.

``fhe.hint`` pins the bit width of every intermediate to its exact worst case over the whole query
box, so no query, however unusual, can overflow a value the input set happened not to reach.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from concrete import fhe

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.paper.plan import KnnPlan, class_from_best_score, vote_scores
from petlab.crypto.knn.ranges import compile_inputset


def circuit_function(plan: KnnPlan, config: CircuitConfig) -> Callable:
    """The traced function: encrypted query levels (d,) -> encrypted class index."""
    weights, offsets = plan.pair_weights, plan.pair_offsets
    rank_matrix, rank_offsets = plan.rank_matrix, plan.rank_offsets
    onehot, k, n_classes = plan.onehot, plan.k, plan.n_classes
    removed_bits = max(0, plan.difference_bits - config.sign_bits)
    score_offsets = vote_scores(np.zeros(n_classes, dtype=np.int64), n_classes)
    to_class = fhe.LookupTable(
        [int(class_from_best_score(s, n_classes)) for s in range(1 << plan.score_bits)]
    )

    def knn(q):
        differences = fhe.hint(q @ weights + offsets, bit_width=plan.difference_bits)
        if removed_bits:
            differences = fhe.truncate_bit_pattern(differences, removed_bits)
        before = differences < 0
        ranks = fhe.hint(before @ rank_matrix, bit_width=plan.rank_bits) + rank_offsets
        mask = ranks < k
        votes = mask @ onehot
        scores = fhe.hint(votes * n_classes + score_offsets, bit_width=plan.score_bits)
        while scores.shape[0] > 1:
            half = scores.shape[0] // 2
            paired = np.maximum(scores[:half], scores[half : 2 * half])
            scores = np.concatenate((paired, scores[2 * half :])) if scores.shape[0] % 2 else paired
        return to_class[scores[0]]

    return knn


def compile_circuit(
    plan: KnnPlan, config: CircuitConfig, simulation: bool = False, execution: bool = True
) -> fhe.Circuit:
    """Compile the circuit; with ``simulation`` it can also be run with ``circuit.simulate``
    (with ``execution=False``, only simulated)."""
    compiler = fhe.Compiler(circuit_function(plan, config), {"q": "encrypted"})
    return compiler.compile(compile_inputset(plan), config.concrete_configuration(simulation, execution))
