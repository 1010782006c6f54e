"""Fixtures of the circuit tests: the Iris circuits of the paper's and the fast families, compiled
once per session, the held-out Iris queries quantized as the model quantizes them, and real
encryption through serialized bytes (``encrypted_answers``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.deployment import (
    KnnClient,
    client_specs_bytes,
    load_server,
    parse_ciphertext,
    parse_evaluation_keys,
    run_encrypted,
    save_server,
)
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


def _encrypted_answers(circuit, queries: np.ndarray, directory: Path) -> list[int]:
    """Real keys, encryption, evaluation and decryption of ``queries``, through serialized bytes
    only (the circuit saved and loaded as a server, keys and ciphertexts as the client sends them)."""
    save_server(circuit, directory / "server.zip")
    server = load_server(directory / "server.zip")
    try:
        client = KnnClient(client_specs_bytes(server))
        client.generate_keys()
        evaluation_keys = parse_evaluation_keys(client.evaluation_keys_bytes())
        return [
            client.decrypt_class(run_encrypted(server, evaluation_keys, parse_ciphertext(client.encrypt(q))))
            for q in queries
        ]
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def encrypted_answers() -> Callable[[object, np.ndarray, Path], list[int]]:
    """``encrypted_answers(circuit, queries, tmp_path)``: see :func:`_encrypted_answers`."""
    return _encrypted_answers
