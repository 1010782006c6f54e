"""The error budget as a model setting: validated, the family's default when not given, in the
compilation settings and the cache key (no compilation here)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from concrete import fhe

from petlab.crypto.knn.families import default_config
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.thermo.circuit import centred_reduction
from petlab.crypto.knn.thermo.plan import DistanceChoice, DistanceSpec
from petlab.server.knn.datasets import load_bundled


@pytest.mark.parametrize("budget", [0, 0.0, 1, 1.0, -1e-3, 1.5, math.nan, math.inf])
def test_a_budget_must_be_a_probability_strictly_between_0_and_1(budget):
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        KnnSettings(global_p_error=budget)


def test_the_budget_is_the_models_and_in_its_cache_key():
    train, _ = load_bundled("iris").split()

    def model(budget):  # the whole training set: no selection to run
        settings = KnnSettings(n=None, global_p_error=budget)
        return build_model("iris", train.features, train.labels, settings)

    default, loose = model(None), model(0.05)
    assert default.global_p_error == default_config("thermo").global_p_error == 1e-4
    assert default.circuit_config() == default_config("thermo")
    assert loose.global_p_error == loose.circuit_config().global_p_error == 0.05
    assert replace(loose, global_p_error=1e-4).circuit_config() == default.circuit_config()
    assert default.cache_key(default.circuit_config()) != loose.cache_key(loose.circuit_config())
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        replace(default, global_p_error=1.0)


def test_rounding_is_exact_or_approximate_and_approximate_is_the_thermo_familys():
    with pytest.raises(ValueError, match="'exact' or 'approximate'"):
        KnnSettings(rounding="nearest")
    with pytest.raises(ValueError, match="thermo family only"):
        KnnSettings(algorithm="fast", rounding="approximate")
    assert KnnSettings().rounding == "exact"


def test_approximate_rounding_is_the_models_and_in_its_cache_key_where_the_distances_truncate():
    """Breast cancer's owner distance drops 2 low bits: approximate rounding is its own circuit
    (another cache key). Iris's default distance truncates nothing: the model is exact whatever
    was asked."""
    # the truncation depends on d, bits and the distance only: 30 rows (both classes) build fast
    train = load_bundled("breast_cancer").subset(np.arange(30))

    owner_distance = DistanceChoice(1, 3, 5)

    def model(name, rounding, train=train, distance=owner_distance):
        settings = KnnSettings(n=None, distance=distance, rounding=rounding)
        return build_model(name, train.features, train.labels, settings)

    exact, approximate = model("breast_cancer", "exact"), model("breast_cancer", "approximate")
    assert exact.plan.spec.shift == 2
    assert (exact.rounding, approximate.rounding) == ("exact", "approximate")
    assert approximate.circuit_config().rounding == "approximate"
    assert exact.cache_key(exact.circuit_config()) != approximate.cache_key(approximate.circuit_config())
    iris = model("iris", "approximate", load_bundled("iris").subset(np.arange(0, 150, 5)), None)
    assert iris.plan.spec.shift == 0 and iris.rounding == "exact"
    with pytest.raises(ValueError, match="'exact' or 'approximate'"):
        replace(exact, rounding="floor")


@pytest.mark.parametrize(
    "name, distance", [("breast_cancer", (1, 3, 5)), ("digits", (16, 6, 6)), ("wine", (2, 4, 5))]
)
def test_approximate_rounding_is_centred_on_the_exact_truncation(name, distance):
    """The approximate circuit rounds ``raw + 2^(shift - 1)``: had concrete rounded it exactly
    (its clear ``round_bit_pattern``), the reduction would read the exact truncation's distance for
    every raw value, so only the approximate rounding's off-centred steps differ from the clear
    reference. The offset fits the raw width of the owner distances."""
    bits = 3 if name == "wine" else 4
    spec = DistanceSpec(load_bundled(name).features.shape[1], bits, *distance)
    half = 1 << (spec.shift - 1)
    assert spec.shift > 0 and (spec.raw_max + half).bit_length() == spec.raw_bits
    raw = np.arange(spec.raw_max + 1)
    rounded = np.array([fhe.round_bit_pattern(int(v) + half, spec.shift) for v in raw])
    assert np.array_equal(centred_reduction(spec, rounded), spec.reduce(raw))
    # rounding to nearest without the offset would not: it differs on about half the values
    plain = np.minimum(
        np.array([fhe.round_bit_pattern(int(v), spec.shift) for v in raw]) >> spec.shift, spec.distance_max
    )
    assert not np.array_equal(plain, spec.reduce(raw))
