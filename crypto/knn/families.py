"""Encrypted k-NN circuit families: what a family is (:class:`KnnFamily`) and the registry that
selects one by name.

A family is an integer k-NN algorithm in three parts that must agree exactly: a *plan* (the clear
constants derived from the quantized training set), a *circuit* compiled with concrete-python
from that plan, and a clear *reference* in numpy that computes the same class for every query
(the tests check ``circuit == reference`` on every data set).

The registered families (:data:`FAMILY_MODULES`):

* ``"thermo"`` (default): distances without lookups from a thermometer-coded query,
  ``crypto.knn.thermo`` (the fastest on every shipped data set, docs/explanation/knn-circuits.md
  "Cost model": no public fact (d, bits, n) of those sets makes another family cheaper, so the default
  does not depend on them);
* ``"fast"``: the O(n)-lookup exact algorithm of ``crypto.knn.fast``;
* ``"paper"``: the delta-matrix circuit of Ameur et al. (PSD 2022, Section 3), ``crypto.knn.paper``.

Callers name a family or hand over a plan; nothing outside ``crypto.knn`` needs to know which runs.
A new family is a subpackage of ``crypto/knn/`` whose ``__init__`` defines
``FAMILY = KnnFamily(...)``, plus one line in :data:`FAMILY_MODULES`. A family's subpackage is
imported the first time it is asked for (the subpackages import this module for
:class:`KnnFamily`, and a program that only prints ``--help`` need not import concrete's circuits).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
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


#: name -> the subpackage whose ``FAMILY`` it is: the registry.
FAMILY_MODULES: dict[str, str] = {
    "fast": "petlab.crypto.knn.fast",
    "paper": "petlab.crypto.knn.paper",
    "thermo": "petlab.crypto.knn.thermo",
}
ALGORITHMS = tuple(FAMILY_MODULES)
DEFAULT_ALGORITHM = "thermo"


@cache
def family(name: str) -> KnnFamily:
    """The family called ``name``; ``ValueError`` naming the known ones otherwise."""
    if name not in FAMILY_MODULES:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {name!r}")
    found = importlib.import_module(FAMILY_MODULES[name]).FAMILY
    if not isinstance(found, KnnFamily) or found.name != name:
        raise TypeError(f"{FAMILY_MODULES[name]}.FAMILY is not the KnnFamily named {name!r}")
    return found


def family_of(plan: object) -> KnnFamily:
    """The family whose plan ``plan`` is."""
    for name in ALGORITHMS:
        candidate = family(name)
        if isinstance(plan, candidate.plan_type):
            return candidate
    raise TypeError(f"{type(plan).__name__} is not the plan of a registered k-NN family")


def default_config(algorithm: str) -> CircuitConfig:
    """The measured default compilation settings of one family."""
    return family(algorithm).config


def build_plan(algorithm: str, train, labels, n_classes: int, k: int, bits: int):
    return family(algorithm).build_plan(train, labels, n_classes, k, bits)


def classify_clear(plan, queries: np.ndarray) -> np.ndarray:
    """The clear reference of whichever integer algorithm ``plan`` describes."""
    return family_of(plan).classify_clear(plan, queries)


def compile_plan(
    plan, config: CircuitConfig, simulation: bool = False, execution: bool = True
) -> fhe.Circuit:
    return family_of(plan).compile(plan, config, simulation, execution)


def split_program(plan, parts: int, config: CircuitConfig):
    """``plan``'s algorithm as stages over ``parts`` partitions (``crypto.knn.split``);
    ``ValueError`` when its family cannot be split."""
    found = family_of(plan)
    if found.split is None:
        raise ValueError(f"the {found.name} family cannot split one query over partitions")
    return found.split(plan, parts, config)


def encode_query(algorithm: str, levels: np.ndarray, bits: int) -> np.ndarray:
    """What a client encrypts for quantized ``levels`` under the named family (public: it needs only
    ``ModelInfo.algorithm`` and ``bits``)."""
    return family(algorithm).encode(np.asarray(levels, dtype=np.int64), bits)
