"""The evaluator keeps deserialised key sets by memory, not by count: six callers taking turns with
six key sets of Iris's size (40 MB each) never reload each other's keys under the default budget,
and a budget smaller than their sum evicts the least recently used first."""

from __future__ import annotations

from pathlib import Path

import pytest

import petlab.server.knn.evaluators as evaluators
from petlab.server.knn.evaluators import KEY_CACHE_BYTES, LocalEvaluator

IRIS_KEY_BYTES = 40 << 20


@pytest.fixture
def loads(monkeypatch) -> list[bytes]:
    """Every deserialisation (a stand-in: the bytes themselves), in order."""
    seen: list[bytes] = []

    def parse(data: bytes) -> bytes:
        seen.append(data[:8])
        return data

    monkeypatch.setattr(evaluators, "parse_evaluation_keys", parse)
    return seen


def key_files(directory: Path, count: int, size: int) -> list[Path]:
    paths = []
    for i in range(count):
        path = directory / f"{i:032x}.bin"
        path.write_bytes(i.to_bytes(8, "big") * (size // 8))
        paths.append(path)
    return paths


def test_six_callers_taking_turns_load_each_key_set_once(tmp_path, loads):
    evaluator = LocalEvaluator({}, cache_bytes=KEY_CACHE_BYTES)
    paths = key_files(tmp_path, 6, IRIS_KEY_BYTES)
    for _ in range(3):  # three rounds of six callers
        for path in paths:
            evaluator._evaluation_keys(path.stem, path)
    assert len(loads) == 6
    assert evaluator.cached_keys() == [path.stem for path in paths]


def test_a_smaller_budget_evicts_the_least_recently_used(tmp_path, loads):
    evaluator = LocalEvaluator({}, cache_bytes=2 * IRIS_KEY_BYTES)
    a, b, c = key_files(tmp_path, 3, IRIS_KEY_BYTES)
    for path in (a, b, a, c):  # c pushes out b, the least recently used
        evaluator._evaluation_keys(path.stem, path)
    assert evaluator.cached_keys() == [a.stem, c.stem]
    evaluator._evaluation_keys(b.stem, b)
    assert len(loads) == 4
