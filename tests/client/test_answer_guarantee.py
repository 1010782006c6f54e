"""What the device says of a model's answers from ``ModelInfo.global_p_error``."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from petlab.client import main as client_main_module
from petlab.client.knn_client import answer_guarantee, bound_text
from petlab.protos import knn_pb2


@pytest.mark.parametrize(
    ("budget", "printed"),
    [(1e-4, "0.0001"), (0.01, "0.01"), (0.1, "0.1"), (1.234e-5, "1.3e-05"), (0.0301, "0.031")],
)
def test_the_bound_is_printed_rounded_up(budget, printed):
    assert bound_text(budget) == printed
    assert float(printed) >= budget
    info = knn_pb2.ModelInfo(name="iris", global_p_error=budget)
    assert answer_guarantee(info) == (
        f"each answer equals the clear k-NN answer of model 'iris' except with probability at most "
        f"{printed} (its error budget)"
    )


@pytest.mark.parametrize("budget", [0.0, 1.0, 2.0, -0.5, math.nan, math.inf])
def test_no_bound_is_claimed_without_a_valid_budget(budget):
    text = answer_guarantee(knn_pb2.ModelInfo(name="iris", global_p_error=budget))
    assert "at most" not in text and "unknown" in text


def test_an_empty_rounding_is_exact_and_approximate_rounding_claims_no_bound():
    """A server older than ``ModelInfo.rounding`` says nothing of it: exact. Approximate rounding's
    one-step errors are outside the budget, so the device states the budget without claiming it
    bounds the answers; a rounding it does not know claims nothing."""
    exact = answer_guarantee(knn_pb2.ModelInfo(name="iris", global_p_error=0.1, rounding="exact"))
    assert exact == answer_guarantee(knn_pb2.ModelInfo(name="iris", global_p_error=0.1))
    approximate = answer_guarantee(knn_pb2.ModelInfo(name="bc", global_p_error=0.01, rounding="approximate"))
    assert "except with probability" not in approximate
    assert approximate.startswith("model 'bc' rounds its distances approximately: an answer may differ")
    assert "error budget of 0.01" in approximate
    unknown = answer_guarantee(knn_pb2.ModelInfo(name="bc", global_p_error=0.01, rounding="nearest"))
    assert "at most" not in unknown and "unknown" in unknown and "'nearest'" in unknown


def test_classify_prints_the_bound_with_the_classes(monkeypatch, capsys, tmp_path):
    """The classify command prints the classes on stdout and the bound on stderr (the encryption is
    replaced by a stand-in: only what the device prints is under test)."""
    info = knn_pb2.ModelInfo(
        name="iris",
        d=4,
        bits=4,
        class_names=["setosa", "versicolor", "virginica"],
        feature_names=["a", "b", "c", "d"],
        feature_lows=[0, 0, 0, 0],
        feature_highs=[10, 10, 10, 10],
        algorithm="thermo",
        global_p_error=0.01,
    )

    class StandIn:
        def __init__(self, *args, **kwargs):
            self.stats: list = []

        def models(self):
            return [info]

        def prepare(self, model):
            return SimpleNamespace(info=info, keygen_seconds=0.0)

        def classify(self, prepared, row):
            return 2

    monkeypatch.setattr("petlab.client.knn_client.KnnRemote", StandIn)
    argv = ["classify", "--server", "127.0.0.1:1", "--model", "iris", "--features", "1,2,3,4"]
    args = client_main_module.build_parser().parse_args([*argv, "--cache-dir", str(tmp_path)])
    assert client_main_module.run(args, channel=None) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["virginica"]
    assert "except with probability at most 0.01 (its error budget)" in captured.err
