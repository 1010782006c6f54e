"""The thermometer family over P partitions of its training set: one pass, one module.

The state a partition hands on is its C sorted k-lists (each class's k smallest distances among
the partition's points; ``network.partition_program``), and two states merge per class keeping
the k smallest (``network.merge_program``, associative), so the split is
``crypto.knn.split.program.merge_tree_program``: ``partition_p(code)`` on each partition's worker,
a binary tree of ``merge_l`` stages (one per level), then ``finish(lists)``: D_k from the class
lists (``network.finish_program``), one indicator ``[a_cj <= D_k]`` per counted list entry, and the vote
(``circuit.decision_function``). The family's rule is unchanged: every point with ``d_i <= D_k``
votes, at most k per class.

Exactness: each class's k smallest over the whole set are among the union of its k smallest per
partition, so the merged lists hold the same values as the one-process network's, and so do D_k
and the capped votes. A class with fewer than k points in a partition is padded with
``spec.filler`` (= 2^w - 1, above every distance, so never at or below D_k: it never votes, as the
one-process network's clear fillers never do). Only values travel, never indices or labels.

Every lookup of the split reads a value that is never negative by construction
(``a - b + filler`` in the compare-exchange, ``D_k - a + filler`` in the indicators):
concrete takes a lookup input's signedness from the input set's values
(``crypto.knn.fast.circuit.exchange_function``).

A partition's lists are refreshed (one identity lookup per entry, ``fhe.refresh``) before they
leave it: the distances are clear combinations of the query's ciphertexts (weights up to 40 on
Iris) and every list entry carries that noise through ``b + min(a - b, 0)``; concrete refuses to
wire such an output to another function ("contaminated by noise coming straight from the
input"). The fast family's distances come out of lookups, so its partitions need no refresh.

Cost per query (:func:`stage_pbs`, checked against the compiled module): partition_p = its
reduction (``n_p (shift + 1)`` when the spec reduces) + its network's comparators (about 2 per
point) + C k refreshes; merge_l = C (k + S(k)) per merge; finish = ``finish_program``'s
comparators + C k indicators (C (k - 1) when C <= k: ``plan.counted_positions``) + the vote's
lookups. Nothing is computed twice: the distances are clear linear combinations.
"""

from __future__ import annotations

import numpy as np
from concrete import fhe

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.split.program import SplitProgram, merge_levels, merge_tree_program, partitions
from petlab.crypto.knn.thermo import reference
from petlab.crypto.knn.thermo.circuit import compile_inputset, decision_function, distance_function
from petlab.crypto.knn.thermo.cost import vote_lookups
from petlab.crypto.knn.thermo.network import (
    FILLER,
    MergeProgram,
    finish_program,
    merge_program,
    partition_program,
)
from petlab.crypto.knn.thermo.plan import DistanceSpec, ThermoPlan, counted_positions


def _exchange(spec: DistanceSpec):
    """``(a, b) -> (min, max)`` for values in ``[0, filler]``, one lookup reading ``a - b + filler``."""
    top, width = spec.filler, spec.compare_bits
    negative_part = fhe.univariate(lambda u: np.minimum(u - top, 0))

    def exchange(a, b):
        m = negative_part(fhe.hint(a - b + top, bit_width=width))
        return fhe.hint(b + m, bit_width=spec.distance_bits), fhe.hint(a - m, bit_width=spec.distance_bits)

    return exchange


def _concatenate(parts):
    return np.concatenate(tuple(parts))


def _gather(program: MergeProgram) -> np.ndarray:
    """Slot of every list entry, class-major; -1 for a filler (the value appended last)."""
    return np.asarray([-1 if s is FILLER else s for slots in program.lists for s in slots], dtype=np.int64)


def _partition(plan: ThermoPlan, index: np.ndarray, exchange):
    spec, weights, offsets = plan.spec, plan.weights[:, index], plan.offsets[index]
    program = partition_program(plan.labels[index], plan.n_classes, plan.k)
    order, distances = _gather(program), distance_function(spec, weights, offsets)

    def body(code):
        store = program.run(distances(code), exchange, _concatenate)
        # refreshed: a wired output may not carry the query's noise through clear weights (concrete
        # refuses to compose it), and every list entry does, through b + min(a - b, 0)
        return fhe.refresh(_concatenate((store, fhe.zeros((1,)) + spec.filler))[order])

    def twin(code):
        dist = spec.reduce(code @ weights + offsets)
        store = program.run(dist, reference.exchange, _concatenate)
        return _concatenate((store, np.array([spec.filler])))[order]

    return body, twin


def _merge(plan: ThermoPlan, exchange):
    program = merge_program(plan.n_classes, plan.k)
    order = _gather(program)
    return (
        lambda a, b: program.run(_concatenate((a, b)), exchange, _concatenate)[order],
        lambda a, b: program.run(_concatenate((a, b)), reference.exchange, _concatenate)[order],
    )


def _finish(plan: ThermoPlan):
    spec, k, n_classes = plan.spec, plan.k, plan.n_classes
    program = finish_program(n_classes, k)
    top = spec.filler
    within = fhe.univariate(lambda u: (u >= top).astype(np.int64))  # u = D_k - a + filler
    # the counted entries (c, j), class-major, and their classes
    counted = np.asarray([c * k + j for c in range(n_classes) for j in counted_positions(n_classes, k)])
    onehot = np.eye(n_classes, dtype=np.int64)[counted // k]
    decide = decision_function(n_classes, plan.vote_gap_bits)

    def body(lists):
        kth = program.run(lists, _exchange(spec), _concatenate)[program.kth]
        inside = within(fhe.hint(kth - lists[counted] + top, bit_width=spec.compare_bits))
        return decide(inside @ onehot)

    def twin(lists):
        kth = program.run(lists, reference.exchange, _concatenate)[program.kth]
        return int(reference.winner((lists[counted] <= kth).astype(np.int64) @ onehot))

    return body, twin


def split_program(plan: ThermoPlan, parts: int, config: CircuitConfig) -> SplitProgram:
    """The module's stages and graph for P = ``parts`` partitions (module docstring)."""
    if not 2 <= parts <= plan.n:
        raise ValueError(f"a split evaluation needs between 2 and n = {plan.n} partitions, got {parts}")
    exchange = _exchange(plan.spec)
    indices = partitions(plan.n, parts)
    return merge_tree_program(
        parts,
        lambda p: _partition(plan, indices[p], exchange),
        _merge(plan, exchange),
        _finish(plan),
        compile_inputset(plan),
        {"family": "thermo", "parts": parts, "stage_pbs": stage_pbs(plan, parts, config)},
    )


def stage_pbs(plan: ThermoPlan, parts: int, config: CircuitConfig) -> dict[str, int]:
    """Lookups (PBS) of each stage, from public figures only (module docstring)."""
    spec, k, n_classes = plan.spec, plan.k, plan.n_classes
    out = {}
    for p, index in enumerate(partitions(plan.n, parts)):
        reduction = len(index) * (spec.shift + 1) if spec.reduced else 0
        network = partition_program(plan.labels[index], n_classes, k).comparators
        out[f"partition_{p}"] = reduction + network + n_classes * k  # + the refresh of its lists
    merges = merge_program(n_classes, k).comparators
    for level in range(1, merge_levels(parts) + 1):
        out[f"merge_{level}"] = merges
    indicators = n_classes * len(counted_positions(n_classes, k))
    out["finish"] = finish_program(n_classes, k).comparators + indicators + vote_lookups(n_classes)
    return out
