"""Fixtures of the circuit tests: the Iris circuits of the paper's and the fast families, compiled
once per session, and the held-out Iris queries quantized as the model quantizes them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.families import default_config
from petlab.crypto.knn.fast.circuit import compile_fast_circuit
from petlab.crypto.knn.paper.circuit import compile_circuit


@pytest.fixture(scope="session")
def iris_fast_circuit(iris_fast_model):
    """The fast circuit for Iris, n = 40, compiled once for simulation and real execution."""
    return compile_fast_circuit(iris_fast_model.plan, default_config("fast"), simulation=True)


@pytest.fixture(scope="session")
def iris_circuit(iris_model):
    """Iris, n = 40, k = 3, 4 bits, compiled for simulation (and for real execution only when
    ``PETLAB_PAPER_SCALE`` asks for the paper-scale encrypted run: compiling for execution doubles
    the compile time)."""
    execution = bool(os.environ.get("PETLAB_PAPER_SCALE"))
    return compile_circuit(iris_model.plan, CircuitConfig(), simulation=True, execution=execution)


@pytest.fixture(scope="session")
def iris_test_levels(iris_model, iris_split) -> np.ndarray:
    _, test = iris_split
    return iris_model.quantizer.transform(test.features)
