"""Shared, session-scoped fixtures: each circuit is compiled once per test session."""

from __future__ import annotations

import numpy as np
import pytest
from petlab.crypto.fast_knn_circuit import compile_fast_circuit
from petlab.crypto.knn_algorithms import default_config
from petlab.crypto.knn_circuit import CircuitConfig, compile_circuit
from petlab.crypto.knn_model import KnnModel, KnnSettings, build_model
from petlab.server.datasets import Dataset, load_bundled


@pytest.fixture(scope="session")
def iris_split() -> tuple[Dataset, Dataset]:
    return load_bundled("iris").split()


@pytest.fixture(scope="session")
def iris_model(iris_split) -> KnnModel:
    """The paper's algorithm (Ameur et al.), n = 40, k = 3, 4 bits."""
    train, _ = iris_split
    return build_model(
        "iris",
        train.features,
        train.labels,
        KnnSettings(n=40, k=3, bits=4, algorithm="paper"),
        train.class_names,
        train.feature_names,
    )


@pytest.fixture(scope="session")
def iris_fast_model(iris_split) -> KnnModel:
    """The fast algorithm (the default), n = 40, k = 3, 4 bits."""
    train, _ = iris_split
    return build_model(
        "iris", train.features, train.labels, KnnSettings(n=40, k=3, bits=4), train.class_names
    )


@pytest.fixture(scope="session")
def iris_fast_circuit(iris_fast_model):
    """The fast circuit for Iris, n = 40, compiled once for simulation and real execution."""
    return compile_fast_circuit(iris_fast_model.plan, default_config("fast"), simulation=True)


@pytest.fixture(scope="session")
def iris_circuit(iris_model):
    """Iris, n = 40, k = 3, 4 bits, compiled for both simulation and real execution."""
    return compile_circuit(iris_model.plan, CircuitConfig(), simulation=True)


@pytest.fixture(scope="session")
def iris_test_levels(iris_model, iris_split) -> np.ndarray:
    _, test = iris_split
    return iris_model.quantizer.transform(test.features)
