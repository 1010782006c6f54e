"""The error budget as a model setting: validated, the family's default when not given, in the
compilation settings and the cache key (no compilation here)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from petlab.crypto.knn.families import default_config
from petlab.crypto.knn.model import KnnSettings, build_model
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
