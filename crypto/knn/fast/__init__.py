"""The fast exact k-NN family: per-feature coarse distances from public tables, the k-th smallest
distance by a selection network, all points at or below it vote (``plan``, ``circuit``,
``reference``, ``selection_network``)."""

from functools import partial

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.families import KnnFamily
from petlab.crypto.knn.fast import reference
from petlab.crypto.knn.fast.circuit import compile_fast_circuit
from petlab.crypto.knn.fast.plan import FastKnnPlan, build_fast_plan
from petlab.crypto.knn.fast.split import split_program

FAMILY = KnnFamily(
    name="fast",
    summary="O(n) lookups: coarse distances, a selection network for the k-th smallest, vote",
    plan_type=FastKnnPlan,
    build_plan=build_fast_plan,
    compile=compile_fast_circuit,
    classify_clear=reference.classify,
    selection_rule=lambda bits: partial(reference.classify_by_sorting, bits=bits),
    # At global_p_error 1e-5 the lookups needed 4096-coefficient polynomials in one measurement
    # (2.4x slower); at 1e-4 they fit 2048. "mono" gave 18 MB of compressed evaluation keys instead
    # of 43 MB at the same latency, but a 16.4 KB result instead of 12.3 KB (Iris, n = 40).
    config=CircuitConfig(global_p_error=1e-4, parameter_selection_strategy="mono"),
    split=split_program,  # two passes over P partitions (crypto.knn.fast.split)
)
