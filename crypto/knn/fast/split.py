"""The fast family over P partitions of its training set: two passes, one module.

The rule is the fast family's (``crypto.knn.fast.plan``): D_k is the k-th smallest distance with
multiplicity, every point with ``d_i <= D_k`` votes (all ties), most votes wins, the smallest
class index among equal votes. Over the partitions of ``program.partitions`` (round robin):

1. ``partition_p(q)``: partition p's distances (steps 1-2 on its own points: its own
   (feature, distinct value) lookups) and its k smallest, ascending (``selection_network.k_smallest``;
   a partition with fewer than k points is padded with ``distance_max``, which never lowers D_k).
2. ``merge(a_0, ..., a_{P-1})``: D_k = the k-th smallest of the P sorted k-lists
   (``selection_network.merge_columns``). Exact: the k smallest of the union are among the k
   smallest of each partition, so this is the whole set's D_k, the same integer as the unsplit
   network's (the k-th smallest of a multiset does not depend on how it is computed).
3. ``count_p(q, D_k)``: partition p's votes ``[d_i <= D_k] @ onehot_p`` (its distances again).
4. ``finish(v_0, ..., v_{P-1})``: votes = sum (no PBS), then step 5.

So the split class equals the unsplit reference on every query (``tests/server/knn/test_split_knn.py``
checks both against a sort, ties included). A one-pass split ("each partition's k smallest
(distance, label) pairs") cannot count ties: a partition may hold more than k points at D_k, and
carrying labels through the network widens every comparison to (distance, label) bits.

Cost (:func:`stage_pbs`, checked against the compiled module): with n_p points and L_p distinct
(feature, level) lookups in partition p, and n_p more coarsening lookups when the plan coarsens,
partition_p = L_p (+ n_p) + ``k_smallest_count(n_p, k)``, count_p = L_p (+ n_p) + n_p,
merge = ``merge_count(P, k)`` = (P - 1) k + ... (about (P - 1)(k + S(k))), finish = step 5's
C(C-1)/2 (r + 1) + C (r = vote bits removed by truncation). The distance lookups run in both
passes of every partition: sum_p 2 L_p against the unsplit L, which is most of the cost at high d
(digits: L about 1,000). A lookup-free distance stage removes that term.
"""

from __future__ import annotations

import numpy as np

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.fast import reference
from petlab.crypto.knn.fast.circuit import (
    decision_function,
    distance_function,
    network_operations,
    within_function,
)
from petlab.crypto.knn.fast.plan import FastKnnPlan, restrict
from petlab.crypto.knn.fast.selection_network import (
    concatenate,
    k_smallest,
    k_smallest_count,
    merge_columns,
    merge_count,
)
from petlab.crypto.knn.ranges import compile_inputset
from petlab.crypto.knn.split.program import (
    ANSWER_STAGE,
    QUERY,
    Node,
    SplitProgram,
    Stage,
    StageGraph,
    partitions,
)


def _clear_exchange(a, b):
    low = b + np.minimum(a - b, 0)
    return low, a - np.minimum(a - b, 0)


def _clear_network(top: int) -> dict:
    return {
        "pad": lambda count: np.full((count,), top, dtype=np.int64),
        "exchange": _clear_exchange,
        "minimum": lambda a, b: _clear_exchange(a, b)[0],
        "maximum": lambda a, b: _clear_exchange(a, b)[1],
    }


def check_parts(plan: FastKnnPlan, parts: int) -> None:
    """``ValueError`` unless 2 <= P <= n: a split needs two partitions and a point in each."""
    if not 2 <= parts <= plan.n:
        raise ValueError(f"a split evaluation needs between 2 and n = {plan.n} partitions, got {parts}")


def split_program(plan: FastKnnPlan, parts: int, config: CircuitConfig) -> SplitProgram:
    """The module's stages and graph for P = ``parts`` partitions (module docstring)."""
    check_parts(plan, parts)
    k, top = plan.k, plan.scale.distance_max
    encrypted, clear = network_operations(plan), _clear_network(top)
    indices = partitions(plan.n, parts)
    subplans = [restrict(plan, index) for index in indices]
    corner = np.zeros(plan.d, dtype=np.int64)
    stages, nodes = [], []
    for p, sub in enumerate(subplans):
        count, count_twin = _count(sub)
        stages += [
            Stage(f"partition_{p}", ("q",), *_partition(sub, k, encrypted, clear)),
            Stage(
                f"count_{p}",
                ("q", "kth"),
                count,
                count_twin,
                extra_inputs=tuple((corner, level) for level in range(top + 1)),  # D_k's whole range
            ),
        ]
        nodes.append(Node(f"partition_{p}", f"partition_{p}", (QUERY,), partition=p))
    lists = tuple(f"a_{p}" for p in range(parts))
    stages.append(Stage("merge", lists, *_merge(k, encrypted, clear)))
    nodes.append(Node("merge", "merge", tuple(f"partition_{p}" for p in range(parts))))
    nodes += [Node(f"count_{p}", f"count_{p}", (QUERY, "merge"), partition=p) for p in range(parts)]
    decide = decision_function(plan, config)
    stages.append(
        Stage(
            ANSWER_STAGE,
            tuple(f"v_{p}" for p in range(parts)),
            lambda *votes: decide(_total(votes)),
            lambda *votes: int(reference.winner(np.sum(votes, axis=0)[None, :], plan.n_classes)[0]),
        )
    )
    nodes.append(Node(ANSWER_STAGE, ANSWER_STAGE, tuple(f"count_{p}" for p in range(parts))))
    description = {"family": "fast", "parts": parts, "stage_pbs": stage_pbs(plan, parts, config)}
    return SplitProgram(
        StageGraph(parts, tuple(nodes)), tuple(stages), tuple(compile_inputset(plan)), description
    )


def _total(votes):
    total = votes[0]
    for more in votes[1:]:
        total = total + more
    return total


def _partition(sub: FastKnnPlan, k: int, encrypted: dict, clear: dict):
    distances = distance_function(sub)

    def body(q):
        return concatenate(k_smallest(distances(q), k, encrypted["pad"], encrypted["exchange"]))

    def twin(q):
        dist = reference.distances(sub, q)[0]
        return np.concatenate(k_smallest(dist, k, clear["pad"], clear["exchange"]))

    return body, twin


def _count(sub: FastKnnPlan):
    distances, within, onehot = distance_function(sub), within_function(sub), sub.onehot

    def body(q, kth):
        return within(distances(q), kth) @ onehot

    def twin(q, kth):
        return (reference.distances(sub, q)[0] <= kth).astype(np.int64) @ onehot

    return body, twin


def _merge(k: int, encrypted: dict, clear: dict):
    def columns(lists):  # row r: every partition's r-th smallest
        return [concatenate([values[r : r + 1] for values in lists]) for r in range(k)]

    def body(*lists):
        return merge_columns(
            columns(lists), k, encrypted["exchange"], encrypted["minimum"], encrypted["maximum"], "kth"
        )

    def twin(*lists):
        return int(
            merge_columns(columns(lists), k, clear["exchange"], clear["minimum"], clear["maximum"], "kth")
        )

    return body, twin


def stage_pbs(plan: FastKnnPlan, parts: int, config: CircuitConfig) -> dict[str, int]:
    """Lookups (PBS) of each stage, from public figures only (module docstring's cost model)."""
    check_parts(plan, parts)
    k, n_classes = plan.k, plan.n_classes
    out = {}
    for p, index in enumerate(partitions(plan.n, parts)):
        sub = restrict(plan, index)
        distances = sub.n_lookups + (sub.n if plan.scale.coarsened else 0)
        out[f"partition_{p}"] = distances + k_smallest_count(sub.n, k)
        out[f"count_{p}"] = distances + sub.n
    out["merge"] = merge_count(parts, k)
    removed = max(0, plan.vote_bits - config.sign_bits)
    out[ANSWER_STAGE] = n_classes * (n_classes - 1) // 2 * (removed + 1) + n_classes
    return out


def whole_pbs(plan: FastKnnPlan, config: CircuitConfig) -> int:
    """Lookups of the unsplit circuit by the same accounting (``crypto.knn.fast.plan``'s model)."""
    from petlab.crypto.knn.fast.selection_network import comparator_count

    removed = max(0, plan.vote_bits - config.sign_bits)
    distances = plan.n_lookups + (plan.n if plan.scale.coarsened else 0)
    decision = plan.n_classes * (plan.n_classes - 1) // 2 * (removed + 1) + plan.n_classes
    return distances + comparator_count(plan.n, plan.k) + plan.n + decision
