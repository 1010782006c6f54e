"""One entry point for the two encrypted k-NN circuit families.

``"fast"`` (default): the O(n)-lookup exact algorithm of ``crypto.fast_knn_plan``;
``"paper"``: the delta-matrix circuit of Ameur et al. (PSD 2022, Section 3), ``crypto.knn_plan``.
Callers dispatch on the plan's type, so nothing outside ``crypto`` needs to know which one runs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
from concrete import fhe
from petlab.crypto import fast_knn_reference, knn_reference
from petlab.crypto.fast_knn_circuit import compile_fast_circuit
from petlab.crypto.fast_knn_plan import FastKnnPlan, build_fast_plan
from petlab.crypto.knn_circuit import CircuitConfig, compile_circuit
from petlab.crypto.knn_plan import KnnPlan, build_plan

ALGORITHMS = ("fast", "paper")
# concrete's bound on a wrong lookup per evaluation, by algorithm: at 1e-5 the fast circuit's
# lookups needed 4096-coefficient polynomials in one measurement (2.4x slower); at 1e-4 they fit
# 2048. "mono" (one parameter set) gave the fast circuit 18 MB of compressed evaluation keys
# instead of 43 MB at the same latency, but a 16.4 KB result instead of 12.3 KB (Iris, n = 40).
GLOBAL_P_ERROR = {"fast": 1e-4, "paper": 1e-5}
STRATEGY = {"fast": "mono", "paper": "multi"}

Plan = KnnPlan | FastKnnPlan


def check_algorithm(algorithm: str) -> str:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    return algorithm


def algorithm_of(plan: Plan) -> str:
    return "fast" if isinstance(plan, FastKnnPlan) else "paper"


def default_config(algorithm: str) -> CircuitConfig:
    """The measured default configuration of one algorithm (``global_p_error`` and the
    parameter-selection strategy differ)."""
    check_algorithm(algorithm)
    return replace(
        CircuitConfig(),
        global_p_error=GLOBAL_P_ERROR[algorithm],
        parameter_selection_strategy=STRATEGY[algorithm],
    )


def build_any_plan(algorithm: str, train, labels, n_classes: int, k: int, bits: int) -> Plan:
    if check_algorithm(algorithm) == "fast":
        return build_fast_plan(train, labels, n_classes, k, bits)
    return build_plan(train, labels, n_classes, k, bits)


def classify_clear(plan: Plan, queries: np.ndarray) -> np.ndarray:
    """The clear reference of whichever integer algorithm ``plan`` describes."""
    if isinstance(plan, FastKnnPlan):
        return fast_knn_reference.classify(plan, queries)
    return knn_reference.classify(plan, queries)


def compile_any(plan: Plan, config: CircuitConfig, simulation: bool = False) -> fhe.Circuit:
    if isinstance(plan, FastKnnPlan):
        return compile_fast_circuit(plan, config, simulation)
    return compile_circuit(plan, config, simulation)


def selection_classifier(algorithm: str, bits: int):
    """The rule ``crypto.selection`` scores subsets with: the one the circuit computes."""
    if check_algorithm(algorithm) == "fast":
        return partial(fast_knn_reference.classify_by_sorting, bits=bits)
    return knn_reference.classify_by_sorting
