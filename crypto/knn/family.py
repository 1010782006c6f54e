"""What a k-NN circuit family is: the contract every family in ``crypto.knn.families`` fulfils.

A family is an integer k-NN algorithm in three parts that must agree exactly: a *plan* (the clear
constants derived from the quantized training set), a *circuit* compiled with concrete-python
from that plan, and a clear *reference* in numpy that computes the same class for every query
(the tests check ``circuit == reference`` on every data set). A new family is a subpackage of
``crypto/knn/`` whose ``__init__`` defines ``FAMILY = KnnFamily(...)``, plus one line in
``crypto/knn/families.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from concrete import fhe

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.split.program import SplitProgram

# (train levels, labels, n_classes, k, bits, **family options) -> plan
PlanBuilder = Callable[..., Any]
# (train levels, labels, k, n_classes, queries) -> classes: the rule training-point selection
# scores subsets with (``crypto.knn.training_points``); the one the circuit computes
SelectionRule = Callable[[np.ndarray, np.ndarray, int, int, np.ndarray], np.ndarray]
# (quantized levels, 1-D or 2-D; bits) -> what the client encrypts
QueryEncoder = Callable[[np.ndarray, int], np.ndarray]


def levels_as_they_are(levels: np.ndarray, bits: int) -> np.ndarray:
    """The encoding of the fast and paper families: the quantized levels themselves."""
    return np.asarray(levels, dtype=np.int64)


@dataclass(frozen=True)
class KnnFamily:
    """One encrypted k-NN circuit family.

    name: what ``KnnSettings.algorithm``, ``petlab-server --algorithm`` and ``ModelInfo.algorithm`` say.
    plan_type: the plan class ``build_plan`` returns (a plan names its family by its type).
    build_plan: the clear constants of the circuit for a quantized training set.
    compile: ``(plan, config, simulation, execution) -> fhe.Circuit``.
    classify_clear: ``(plan, queries) -> classes``, the clear reference of the same integer algorithm.
    selection_rule: ``(bits, **family options) -> rule`` used to choose the n training points the
        circuit keeps (family options: ``KnnSettings.distance`` for thermo).
    config: the measured default compilation settings of this family.
    split: ``(plan, parts, config) -> crypto.knn.split.program.SplitProgram``, the same algorithm
        as stages over P partitions of the training set (one query over many workers), or None
        when the family cannot be split.
    encode: ``(levels, bits) -> array``: what the client encrypts for a quantized query (public:
        a client picks it by ``ModelInfo.algorithm``); the levels themselves unless the family
        says otherwise.
    """

    name: str
    summary: str
    plan_type: type
    build_plan: PlanBuilder
    compile: Callable[[Any, CircuitConfig, bool, bool], fhe.Circuit]
    classify_clear: Callable[[Any, np.ndarray], np.ndarray]
    selection_rule: Callable[..., SelectionRule]
    config: CircuitConfig
    split: Callable[[Any, int, CircuitConfig], SplitProgram] | None = None
    encode: QueryEncoder = levels_as_they_are
