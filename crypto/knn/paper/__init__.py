"""The paper's family, HE-kNN-V (Ameur et al., PSD 2022, Section 3): the delta matrix over all pairs,
ranks by column sums, the mask ``rank < k``, vote and encrypted argmax (``plan``, ``circuit``,
``reference``). O(n^2) lookups."""

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.families import KnnFamily
from petlab.crypto.knn.paper import reference
from petlab.crypto.knn.paper.circuit import compile_circuit
from petlab.crypto.knn.paper.plan import KnnPlan, build_plan

FAMILY = KnnFamily(
    name="paper",
    summary="O(n^2) lookups: the delta matrix, ranks, mask rank < k, vote (Ameur et al.)",
    plan_type=KnnPlan,
    build_plan=build_plan,
    compile=compile_circuit,
    classify_clear=reference.classify,
    selection_rule=lambda bits: reference.classify_by_sorting,
    config=CircuitConfig(global_p_error=1e-5, parameter_selection_strategy="multi"),
)
