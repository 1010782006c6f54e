"""A data owner's k-NN model: quantizer, selected training points and the circuit's plan.

Pipeline (Ameur et al., PSD 2022, Section 4.1): fit the per-feature scale on the training set
(``crypto.knn.quantization``), quantize it, keep n representative points
(``crypto.knn.training_points``, scored with the rule the chosen circuit computes), derive the
circuit constants (``crypto.knn.fast.plan`` or the paper's ``crypto.knn.paper.plan``).
:meth:`KnnModel.public_info` is what a client may see: name, d, bits, class and feature names, and
the quantizer's bounds it needs to quantize its query; never n, k or the training data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib.metadata import version
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from petlab.crypto.knn.condensation import choose_size
from petlab.crypto.knn.config import CircuitConfig, check_rounding
from petlab.crypto.knn.families import DEFAULT_ALGORITHM, default_config, family, family_of
from petlab.crypto.knn.quantization import MinMaxQuantizer
from petlab.crypto.knn.thermo.plan import DistanceChoice
from petlab.crypto.knn.training_points import Selection, select_training_points

# Bump when the circuit's construction changes, so cached compilations are not reused.
CIRCUIT_FORMAT_VERSION = 2


@dataclass(frozen=True)
class KnnSettings:
    """What the data owner chooses: n points kept, k neighbours, feature bits, selection seed and
    the circuit family (``"thermo"``, the default, ``"fast"`` or the paper's ``"paper"``;
    ``crypto.knn.families``), the thermo family's distance, condensation of the whole set, and the
    error budget: concrete's ``global_p_error``, the probability that any lookup of one evaluation
    errs, which bounds the probability that an encrypted answer differs from the clear k-NN answer
    (None: the family's measured default, ``crypto.knn.families.default_config``). A larger budget
    lets concrete pick smaller parameters (docs/explanation/knn-speed.md, "The error budget").
    ``rounding`` (thermo only): how a distance's low bits are dropped before its reduction lookup,
    "exact" or "approximate" (concrete's approximate rounding: fewer and cheaper lookups, but each
    distance may land one step off, outside the error budget; ``crypto.knn.config.CircuitConfig``).
    A model whose distances are not truncated (e.g. Iris's default distance) has nothing to round
    and is built exact whatever this says."""

    n: int | None = 40  # None: the whole training set
    k: int = 3
    bits: int = 4
    seed: int = 0
    algorithm: str = DEFAULT_ALGORITHM
    distance: DistanceChoice | None = None  # thermo only: the owner's distance (None: its default)
    # only with n = None: keep the smallest n within this accuracy fraction of the whole training set,
    # chosen on the training rows only (``crypto.knn.condensation``); None keeps every point
    condense: float | None = None
    global_p_error: float | None = None
    rounding: str = "exact"

    def __post_init__(self) -> None:
        family(self.algorithm)  # ValueError for an unknown family
        if self.global_p_error is not None:
            check_error_budget(self.global_p_error)
        check_rounding(self.rounding)
        if self.rounding != "exact" and self.algorithm != "thermo":
            raise ValueError("approximate rounding applies to the thermo family only")
        if self.distance is not None and self.algorithm != "thermo":
            raise ValueError("a distance choice applies to the thermo family only")
        if self.condense is not None and not 0 <= self.condense < 1:
            raise ValueError(f"condense is an accuracy tolerance in [0, 1), got {self.condense}")
        if self.n is not None and self.n < 2:
            raise ValueError(f"n must be at least 2, got {self.n}")
        if not 1 <= self.k <= (self.n if self.n is not None else self.k):
            raise ValueError(f"k must be between 1 and n = {self.n}, got {self.k}")


@dataclass(frozen=True)
class KnnModel:
    name: str
    quantizer: MinMaxQuantizer
    plan: Any  # the plan of one family in crypto.knn.families
    class_names: tuple[str, ...]
    feature_names: tuple[str, ...]
    selection: Selection
    # concrete's global_p_error the circuit is compiled with (KnnSettings.global_p_error, else the
    # family's default): an encrypted answer equals the clear reference's except with at most this
    # probability; published in ModelInfo
    global_p_error: float = 1e-4
    # how the circuit drops distances' low bits (KnnSettings.rounding; "exact" when the plan
    # truncates nothing): published in ModelInfo, since "approximate" answers fall outside the budget
    rounding: str = "exact"

    def __post_init__(self) -> None:
        check_error_budget(self.global_p_error)
        check_rounding(self.rounding)

    def circuit_config(self) -> CircuitConfig:
        """The family's measured compilation settings with this model's error budget and rounding:
        what ``petlab-server`` compiles the model with (and so what its cache key covers)."""
        return replace(
            default_config(self.algorithm), global_p_error=self.global_p_error, rounding=self.rounding
        )

    @property
    def d(self) -> int:
        return self.plan.d

    @property
    def algorithm(self) -> str:
        return family_of(self.plan).name

    def encode(self, levels: np.ndarray) -> np.ndarray:
        """What a client of this model encrypts for quantized ``levels`` (its family's encoding)."""
        return family_of(self.plan).encode(np.asarray(levels, dtype=np.int64), self.plan.bits)

    def public_info(self) -> dict:
        return {
            "name": self.name,
            "d": self.d,
            "bits": self.plan.bits,
            "class_names": list(self.class_names),
            "feature_names": list(self.feature_names),
            "quantizer": self.quantizer.to_dict(),
        }

    def cache_key(self, config: CircuitConfig, parts: int = 1) -> str:
        """Digest of everything the compiled artifact depends on (training data, settings,
        circuit configuration, concrete-python version, this module's circuit format, and the
        number of partitions of a split evaluation, ``crypto.knn.split``)."""
        settings = config.to_dict()
        if settings["rounding"] == "exact":  # exact circuits keep the keys they had
            del settings["rounding"]
        digest = hashlib.sha256()
        for array in (self.plan.train, self.plan.labels):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
            digest.update(str(array.shape).encode())
        described = {
            "k": self.plan.k,
            "bits": self.plan.bits,
            "n_classes": self.plan.n_classes,
            "algorithm": self.algorithm,
            "distance": repr(getattr(self.plan, "spec", None)),  # the thermo family's public distance
            "config": settings,
            "concrete": version("concrete-python"),
            "format": CIRCUIT_FORMAT_VERSION,
        }
        if parts > 1:  # a split module (whole circuits keep the keys they had)
            described["parts"] = parts
        digest.update(json.dumps(described, sort_keys=True).encode())
        return digest.hexdigest()


def build_model(
    name: str,
    features: np.ndarray,
    labels: np.ndarray,
    settings: KnnSettings,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
    public_bounds: tuple[ArrayLike, ArrayLike] | None = None,
) -> KnnModel:
    """Fit, quantize, select and plan. ``labels`` are class indices 0..C-1.

    ``public_bounds`` (per-feature lows and highs from a public source) set the quantizer, which
    :meth:`KnnModel.public_info` publishes to every client. Without them the quantizer is fitted
    on the training set, and its bounds are then the training set's exact minima and maxima: fine
    for experiments on public data, never for a server (``petlab-server`` always passes them)."""
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels)
    if features.ndim != 2 or len(features) != len(labels):
        raise ValueError("features must be 2-D with one label per row")
    if not np.issubdtype(labels.dtype, np.integer) or labels.size == 0 or labels.min() < 0:
        raise ValueError("labels must be non-negative class indices")
    n_classes = int(labels.max()) + 1 if class_names is None else len(class_names)
    if n_classes < 2 or len(np.unique(labels)) < 2:
        raise ValueError("a classifier needs at least two classes; the training labels have one")
    if public_bounds is None:
        quantizer = MinMaxQuantizer.fit(features, settings.bits)
    else:
        lows, highs = (np.asarray(side, dtype=np.float64).tolist() for side in public_bounds)
        quantizer = MinMaxQuantizer.from_dict({"bits": settings.bits, "lows": lows, "highs": highs})
        if quantizer.n_features != features.shape[1]:
            raise ValueError(
                f"public bounds cover {quantizer.n_features} features, the data has {features.shape[1]}"
            )
    levels = quantizer.transform(features)
    options = {} if settings.distance is None else {"distance": settings.distance}
    rule = family(settings.algorithm).selection_rule(settings.bits, **options)
    n = settings.n
    if n is None and settings.condense is not None:
        n = choose_size(levels, labels, settings.k, n_classes, rule, settings.condense, settings.seed)
    selection = select_training_points(
        levels,
        labels,
        len(levels) if n is None else n,
        settings.k,
        n_classes,
        seed=settings.seed,
        classifier=rule,
    )
    plan = family(settings.algorithm).build_plan(
        levels[selection.indices],
        labels[selection.indices],
        n_classes,
        settings.k,
        settings.bits,
        **options,
    )
    names = tuple(class_names) if class_names is not None else tuple(str(c) for c in range(n_classes))
    feature_names = (
        tuple(feature_names)
        if feature_names is not None
        else tuple(f"x{f}" for f in range(features.shape[1]))
    )
    budget = settings.global_p_error
    if budget is None:
        budget = default_config(settings.algorithm).global_p_error
    spec = getattr(plan, "spec", None)  # the thermo family's distance: rounding only where it truncates
    rounding = settings.rounding if spec is not None and spec.shift > 0 else "exact"
    return KnnModel(name, quantizer, plan, names, feature_names, selection, budget, rounding)


def check_error_budget(global_p_error: float) -> float:
    """``global_p_error`` if it is a probability strictly between 0 and 1 (concrete rejects 0 and
    1 means no guarantee at all); ``ValueError`` saying so otherwise (NaN included)."""
    if not isinstance(global_p_error, (int, float)) or not 0.0 < float(global_p_error) < 1.0:
        raise ValueError(
            f"the error budget (global_p_error) must be a probability strictly between 0 and 1, "
            f"got {global_p_error!r}"
        )
    return float(global_p_error)
