"""``knn-bench --accuracy-splits``: the accuracy column builds each model from its training split
only (the owner's condensed set never sees a held-out row), and the targets table calls a slow
row missed."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from petlab.crypto.knn import condensation
from petlab.errors import BadInput
from petlab.experiments import knn_accuracy, knn_bench
from petlab.server.knn.datasets import owner_settings


def test_the_bench_accuracy_builds_models_without_test_rows(monkeypatch, kept_points, replace_held_out_rows):
    """Wine's owner setting (condensed by cross-validation) through ``settings_accuracy`` twice on
    split 0, the second time with every held-out row replaced: the same points are kept, and the
    score (computed on the held-out rows) changes."""
    monkeypatch.setattr(condensation, "SEARCH_RANDOM_ROUNDS", 1)  # a cheaper search: same data flow
    monkeypatch.setattr(condensation, "SEARCH_SWAP_ROUNDS", 0)
    first, _ = knn_accuracy.settings_accuracy("wine", owner_settings("wine"), 1)
    replace_held_out_rows(features=False)
    second, _ = knn_accuracy.settings_accuracy("wine", owner_settings("wine"), 1)
    (first_train, first_labels), (second_train, second_labels) = kept_points
    assert len(first_train) < 142  # condensed
    assert np.array_equal(first_train, second_train) and np.array_equal(first_labels, second_labels)
    assert first != second  # the held-out rows are what is scored


def test_the_targets_table_calls_a_slow_row_missed():
    row = {
        "dataset": "breast_cancer",
        "n_kept": 455,
        "server_median_s": 54.0,
        "pbs_count": 2292,
        "pbs_per_point": 5.04,
        "accuracy": 0.969,
        "float_knn": 0.974,
        "load_average": 2.0,
    }
    table = knn_bench.targets_table([row, {**row, "server_median_s": 14.0}])
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert "**missed**" in rows[0] and "637" in rows[0]  # 15 s / (54 s / 2292 PBS)
    assert "met" in rows[1]


def test_n_owner_is_the_owner_settings_own_size_and_needs_them(capsys):
    """``--n owner`` parses to the owner's size choice; without ``--owner-settings`` (or with a
    family other than thermo) it is a usage error (status 2) before anything is built."""
    parser = argparse.ArgumentParser()
    knn_bench.add_arguments(parser)
    assert parser.parse_args(["--n", "owner", "all", "40"]).n == [knn_bench.OWNER_N, None, 40]
    wrong = (["--algorithm", "thermo"], ["--owner-settings"], ["--owner-settings", "--algorithm", "fast"])
    for flags in wrong:
        with pytest.raises(BadInput, match="--n owner needs --owner-settings and --algorithm thermo"):
            knn_bench.run(parser.parse_args(["--n", "owner", *flags]))
