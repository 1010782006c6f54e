"""The registry of encrypted k-NN circuit families, selected by name.

``"thermo"`` (default): distances without lookups from a thermometer-coded query, ``crypto.knn.thermo``
(the fastest on every shipped data set, README "Cost": no public fact (d, bits, n) of those sets makes
another family cheaper, so the default does not depend on them);
``"fast"``: the O(n)-lookup exact algorithm of ``crypto.knn.fast``;
``"paper"``: the delta-matrix circuit of Ameur et al. (PSD 2022, Section 3), ``crypto.knn.paper``.
Callers name a family or hand over a plan; nothing outside ``crypto.knn`` needs to know which runs.
A new family: a subpackage defining ``FAMILY`` (``crypto.knn.family.KnnFamily``) and one entry below.
"""

from __future__ import annotations

import numpy as np
from concrete import fhe

from petlab.crypto.knn import fast, paper, thermo
from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.family import KnnFamily

FAMILIES: dict[str, KnnFamily] = {
    family.name: family for family in (fast.FAMILY, paper.FAMILY, thermo.FAMILY)
}
ALGORITHMS = tuple(FAMILIES)
DEFAULT_ALGORITHM = "thermo"


def family(name: str) -> KnnFamily:
    """The family called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {name!r}") from None


def family_of(plan: object) -> KnnFamily:
    """The family whose plan ``plan`` is."""
    for candidate in FAMILIES.values():
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


def compile_plan(plan, config: CircuitConfig, simulation: bool = False, execution: bool = True) -> fhe.Circuit:
    return family_of(plan).compile(plan, config, simulation, execution)


def split_program(plan, parts: int, config: CircuitConfig):
    """``plan``'s algorithm as stages over ``parts`` partitions (``crypto.knn.split``);
    ``ValueError`` when its family cannot be split."""
    family = family_of(plan)
    if family.split is None:
        raise ValueError(f"the {family.name} family cannot split one query over partitions")
    return family.split(plan, parts, config)


def encode_query(algorithm: str, levels: np.ndarray, bits: int) -> np.ndarray:
    """What a client encrypts for quantized ``levels`` under the named family (public: it needs only
    ``ModelInfo.algorithm`` and ``bits``)."""
    return family(algorithm).encode(np.asarray(levels, dtype=np.int64), bits)
