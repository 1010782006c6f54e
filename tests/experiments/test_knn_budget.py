"""The error-budget experiment's rule, and the owner settings' budgets taken from its results."""

from __future__ import annotations

from pathlib import Path

import pytest

from petlab.experiments import knn_budget
from petlab.server.knn.datasets import owner_settings

RESULTS = Path(__file__).resolve().parents[2] / "results" / "knn_budget.csv"


def entry(budget, complexity, agreement, accuracy, rounding="exact", float_knn=0.95, trials=100_000):
    return {
        "dataset": "d",
        "trials": trials,
        "agree": round(agreement * trials),
        "global_p_error": budget,
        "rounding": rounding,
        "complexity": complexity,
        "agreement": agreement,
        "accuracy": accuracy,
        "float_knn": float_knn,
    }


def test_the_cheapest_variant_that_meets_the_bar_is_chosen():
    summary = [
        entry(1e-4, 10.0, 1.0, 0.95),
        entry(1e-2, 6.0, 0.996, 0.941),  # within one point, agreement 99.6 %: meets the bar
        entry(1e-1, 5.0, 0.994, 0.95),  # agreement below 99.5 %
        entry(3e-2, 5.5, 0.999, 0.939),  # 1.1 points below float k-NN
        entry(1e-2, 4.0, 0.994, 0.95, rounding="approximate"),  # cheaper, agreement below 99.5 %
    ]
    assert knn_budget.chosen_settings(summary) == {"d": (1e-2, "exact")}
    assert knn_budget.chosen_settings(summary[2:]) == {}
    # approximate rounding competes like any variant, measured against the exact clear reference
    cheaper = [*summary, entry(1e-1, 3.0, 0.997, 0.945, rounding="approximate")]
    assert knn_budget.chosen_settings(cheaper) == {"d": (1e-1, "approximate")}
    # on a tie of complexity: the larger budget, then exact rounding
    tied = [entry(1e-2, 2.0, 1.0, 0.95, rounding="approximate"), entry(1e-2, 2.0, 1.0, 0.95)]
    assert knn_budget.chosen_settings(tied) == {"d": (1e-2, "exact")}


def test_agreement_must_clear_the_bar_with_95_percent_confidence():
    """99.54 % of 2,160 simulated answers (wine with approximate rounding) is above 99.5 % but
    its Clopper-Pearson lower bound is 99.22 %: not chosen; the same share of a million answers is."""
    few = [entry(1e-4, 10.0, 1.0, 0.95, trials=2_160), entry(1e-1, 5.0, 2_150 / 2_160, 0.95, trials=2_160)]
    assert knn_budget.chosen_settings(few) == {"d": (1e-4, "exact")}
    assert knn_budget.agreement_lower_bound(2_150, 2_160) == pytest.approx(0.99216, abs=1e-4)
    many = [entry(1e-4, 10.0, 1.0, 0.95), entry(1e-1, 5.0, 2_150 / 2_160, 0.95, trials=1_000_000)]
    assert knn_budget.chosen_settings(many) == {"d": (1e-1, "exact")}
    # every answer agreeing: the bound is alpha ** (1 / n), so 500 answers are too few for 99.5 %
    assert knn_budget.agreement_lower_bound(500, 500) == pytest.approx(0.05 ** (1 / 500))
    assert knn_budget.agreement_lower_bound(500, 500) < knn_budget.MIN_AGREEMENT


@pytest.mark.skipif(not RESULTS.exists(), reason="results/knn_budget.csv is not in this checkout")
def test_the_owner_settings_budgets_and_roundings_are_the_measured_choice():
    """``owner_settings`` carries, for every data set the committed sweep measured, the budget and
    rounding its rule chose (``python -m petlab.experiments.knn_budget``,
    docs/explanation/knn-speed.md)."""
    chosen = knn_budget.chosen_settings(knn_budget.summarize(knn_budget.read_rows(RESULTS)))
    assert chosen, "the sweep chose no setting"
    owner = {name: (owner_settings(name).global_p_error, owner_settings(name).rounding) for name in chosen}
    assert owner == chosen
