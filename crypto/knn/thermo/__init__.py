"""The thermometer family: the client sends ``[q_f >= t]`` bits, so distances are clear linear
combinations of encrypted bits (no lookup); per-class selection networks keep each class's k
smallest distances, D_k comes from those lists, each class counts at most k votes
(``encoding``, ``plan``, ``network``, ``circuit``, ``reference``)."""

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.families import KnnFamily
from petlab.crypto.knn.thermo import reference
from petlab.crypto.knn.thermo.circuit import compile_thermo_circuit
from petlab.crypto.knn.thermo.encoding import thermometer
from petlab.crypto.knn.thermo.plan import ThermoPlan, build_thermo_plan
from petlab.crypto.knn.thermo.split import split_program

FAMILY = KnnFamily(
    name="thermo",
    summary="O(n) lookups, none for distances: thermometer-coded query, per-class top-k lists, capped vote",
    plan_type=ThermoPlan,
    build_plan=build_thermo_plan,
    compile=compile_thermo_circuit,
    classify_clear=reference.classify,
    selection_rule=reference.selection_rule,
    config=CircuitConfig(global_p_error=1e-4, parameter_selection_strategy="multi"),
    encode=thermometer,
    split=split_program,  # one pass over P partitions (crypto.knn.thermo.split)
)
