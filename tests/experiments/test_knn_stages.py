"""The stage timer's prefix circuits compute what it checks them against (simulation, a few points
of breast_cancer: its owner distance truncates 2 bits, then reduces)."""

from __future__ import annotations

import numpy as np
import pytest
from concrete import fhe

from petlab.crypto.knn.families import default_config
from petlab.crypto.knn.thermo.circuit import compile_inputset, distance_function
from petlab.experiments.knn_stages import clear_stage, owner_model, stages_of
from petlab.server.knn.datasets import load_bundled


def test_prefix_circuits_equal_their_clear_stages():
    model = owner_model("breast_cancer", n=4)
    spec = model.plan.spec
    assert spec.reduced and spec.shift == 2
    assert [name for name, _ in stages_of(model)] == ["raw", "truncated", "reduced", "whole"]
    _, test = load_bundled("breast_cancer").split()
    codes = np.stack([model.encode(q) for q in model.quantizer.transform(test.features)[:6]])
    config = default_config("thermo").concrete_configuration(simulation=True, execution=False)
    outputs = {}
    for name, function in stages_of(model)[:-1]:
        circuit = fhe.Compiler(function, {"code": "encrypted"}).compile(compile_inputset(model.plan), config)
        got = np.stack([circuit.simulate(code) for code in codes])
        assert np.array_equal(got, clear_stage(model, name, codes)), name
        outputs[name] = got
    # the stages differ where they should: truncation clears the low bits, the reduction saturates
    assert np.all(outputs["truncated"] % 4 == 0) and not np.array_equal(outputs["raw"], outputs["truncated"])
    assert np.array_equal(outputs["reduced"], np.minimum(outputs["truncated"] >> 2, spec.distance_max))


def test_unknown_stage_is_refused():
    model = owner_model("breast_cancer", n=4)
    with pytest.raises(ValueError, match="upto"):
        distance_function(model.plan.spec, model.plan.weights, model.plan.offsets, "sorted")
