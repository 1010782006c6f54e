"""The one privacy-cost type and the one place where costs compose: values, rules
by hand, refusals, and every synthesizer reporting through it."""

import math

import pytest

from petlab.plaindata.adaptive.histograms import improved_cost, leaf_measurement_cost
from petlab.plaindata.dp.composition import parallel, repeated, report_lines, sequential
from petlab.plaindata.dp.privacy_cost import DP, PROBABILISTIC_DP, PrivacyCost
from petlab.plaindata.onthemap.statement import PriorSummary, release_cost


def test_costs_are_checked_values():
    with pytest.raises(ValueError, match="epsilon"):
        PrivacyCost(-1.0)
    with pytest.raises(ValueError, match="delta"):
        PrivacyCost(1.0, 1.5)
    with pytest.raises(ValueError, match="notion"):
        PrivacyCost(1.0, notion="approximately private")
    cost = PrivacyCost(0.5, 1e-6, "a count", "Laplace mechanism")
    assert cost.line() == "a count: (epsilon = 0.5, delta = 1e-06)-DP (Laplace mechanism)"
    assert cost.named("the count").what == "the count" and cost.named("x").covered_by == "Laplace mechanism"


def test_composition_rules_by_hand():
    a, b = PrivacyCost(0.5, 1e-6, "a"), PrivacyCost(1.5, 0.0, "b")
    total = sequential([a, b], "both")
    assert (total.epsilon, total.delta, total.parts) == (2.0, 1e-6, (a, b))
    assert parallel([a, b]).epsilon == 1.5 and parallel([a, b]).delta == 1e-6
    runs = repeated(PrivacyCost(0.01, 0.0, "one"), 100, 1e-6, "hundred")
    assert runs.epsilon < math.sqrt(200 * math.log(1e6)) * 0.01 + 100 * 0.01 * math.expm1(0.01)
    assert runs.delta == pytest.approx(1e-6) and "optimal" in runs.covered_by
    few = repeated(PrivacyCost(1.0, 1e-3, "one"), 3, 1e-6, "three")
    assert few.epsilon <= 3.0 and few.delta == pytest.approx(3e-3, abs=2e-6)
    vacuous = repeated(PrivacyCost(1.0, 0.4, "one"), 3, 1e-6, "three")
    assert vacuous.delta == 1.0 and vacuous.vacuous and "says nothing" in vacuous.line()
    lines = report_lines([a, b])
    assert lines[0].startswith("total: (epsilon = 2") and lines[1].strip().startswith("a:")


def test_probabilistic_dp_does_not_compose_with_dp():
    pdp = PrivacyCost(8.57, 1e-5, "OnTheMap", notion=PROBABILISTIC_DP)
    with pytest.raises(ValueError, match="DP costs"):
        sequential([pdp, PrivacyCost(1.0)])
    with pytest.raises(ValueError, match="DP costs"):
        repeated(pdp, 2, 1e-6, "twice")
    assert report_lines([pdp])[0].endswith("-probabilistic DP")


def test_every_synthesizer_states_its_cost_as_the_one_type():
    adaptive = sequential([improved_cost(1.0), leaf_measurement_cost(1.0)])
    assert isinstance(adaptive, PrivacyCost) and adaptive.epsilon == 3.0 and adaptive.notion == DP
    onthemap = release_cost(4.6, 1e-5, (1.0, 0.0378), 200.0, PriorSummary(1, 0.01))
    assert isinstance(onthemap, PrivacyCost) and onthemap.notion == PROBABILISTIC_DP
    assert onthemap.epsilon == pytest.approx(4.6 - math.log1p(-1e-5) + math.log(1 / 0.0378) + math.log(2))
    assert "epsilon' = 8.5687" in onthemap.line()
    assert PriorSummary.combine([PriorSummary(1, 0.02), PriorSummary(2, 0.01)]) == PriorSummary(2, 0.01)
