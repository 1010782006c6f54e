"""The error-budget experiment's rule, and the owner settings' budgets taken from its results."""

from __future__ import annotations

from pathlib import Path

import pytest

from petlab.experiments import knn_budget
from petlab.server.knn.datasets import owner_settings

RESULTS = Path(__file__).resolve().parents[2] / "results" / "knn_budget.csv"


def entry(budget, complexity, agreement, accuracy, rounding="exact", float_knn=0.95):
    return {
        "dataset": "d",
        "global_p_error": budget,
        "rounding": rounding,
        "complexity": complexity,
        "agreement": agreement,
        "accuracy": accuracy,
        "float_knn": float_knn,
    }


def test_the_cheapest_budget_that_meets_the_bar_is_chosen():
    summary = [
        entry(1e-4, 10.0, 1.0, 0.95),
        entry(1e-2, 6.0, 0.996, 0.941),  # within one point, agreement 99.6 %: meets the bar
        entry(1e-1, 5.0, 0.994, 0.95),  # agreement below 99.5 %
        entry(3e-2, 5.5, 0.999, 0.939),  # 1.1 points below float k-NN
        entry(1e-2, 1.0, 1.0, 0.95, rounding="approximate"),  # outside the budget: never chosen
    ]
    assert knn_budget.chosen_budgets(summary) == {"d": 1e-2}
    assert knn_budget.chosen_budgets(summary[2:4]) == {}


@pytest.mark.skipif(not RESULTS.exists(), reason="results/knn_budget.csv is not in this checkout")
def test_the_owner_settings_budgets_are_the_measured_choice():
    """``owner_settings`` carries, for every data set the committed sweep measured, the budget
    its rule chose (``python -m petlab.experiments.knn_budget``, docs/explanation/knn-speed.md)."""
    chosen = knn_budget.chosen_budgets(knn_budget.summarize(knn_budget.read_rows(RESULTS)))
    assert chosen, "the sweep chose no budget"
    assert {name: owner_settings(name).global_p_error for name in chosen} == chosen
