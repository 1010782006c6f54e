"""The controller's output checking against SACRO's acro package on the same tables, and
query-set-size control against a classic tracker attack."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from petlab.plaindata import acs_sample_path
from petlab.server.controller.analyses import AnalysisError, evaluate
from petlab.server.controller.output_checking import ACRO_PARITY, check
from petlab.server.controller.query_set_control import QuerySetControl

acro_module = pytest.importorskip("acro")
sm = pytest.importorskip("statsmodels.api")


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    return pd.read_csv(acs_sample_path())


@pytest.fixture(scope="module")
def acro(tmp_path_factory):
    """acro formats every table and mask into its log messages eagerly (f-strings), even with its
    logger at ERROR: a fifth of this module's CPU went to ``DataFrame.__repr__``. Short display
    limits make those strings cheap; acro's decisions come from the masks, never from the strings."""
    logging.getLogger("acro").setLevel(logging.ERROR)
    with pd.option_context("display.max_rows", 2, "display.max_columns", 2):
        yield acro_module.ACRO(suppress=False)


def acro_status(acro) -> str:
    return acro.results.get_index(-1).status


def categorical(series: pd.Series, data: pd.DataFrame) -> pd.Series:
    return series.astype(pd.CategoricalDtype(sorted(data[series.name].unique())))


def random_where(rng: np.random.Generator) -> dict:
    """Query sets from a few records to thousands, so every rule is exercised both ways."""
    low = int(rng.integers(1, 70))
    where = {"age": {"between": [low, low + int(rng.integers(0, 79))]}}
    if rng.random() < 0.3:
        where["hpw"] = {"between": [int(rng.integers(1, 60)), 99]}
    if rng.random() < 0.3:
        where["edu"] = {"in": rng.choice(np.arange(1, 25), size=3, replace=False).tolist()}
    return where


CASES = 30


def test_frequency_and_magnitude_decisions_equal_acros(data, acro):
    rng = np.random.default_rng(20)
    decisions = {"release": 0, "refuse": 0}
    for _ in range(CASES):
        rows, cols = rng.choice(["sex", "race", "ms", "incc"], size=2, replace=False)
        where = random_where(rng)
        for spec in (
            {"type": "frequency", "rows": rows, "columns": cols, "where": where},
            {
                "type": "magnitude",
                "rows": rows,
                "columns": cols,
                "value": "hpw",
                "statistic": str(rng.choice(["sum", "mean"])),
                "where": where,
            },
        ):
            ours = check(evaluate(spec, data), ACRO_PARITY)
            subset = data[evaluate({"type": "count", "where": where}, data).query_sets[0]]
            if subset.empty:  # acro then builds an empty table with nothing to check; we refuse
                assert not ours.release  # (every cell is a disclosive zero)
                continue
            kwargs = {"dropna": False}
            if spec["type"] == "magnitude":
                kwargs.update(values=subset["hpw"], aggfunc=spec["statistic"])
            acro.crosstab(categorical(subset[rows], data), categorical(subset[cols], data), **kwargs)
            assert ours.release == (acro_status(acro) == "pass"), (spec, ours.reasons)
            decisions["release" if ours.release else "refuse"] += 1
    assert min(decisions.values()) >= 10, decisions  # both outcomes really were compared


def test_dominance_and_p_percent_match_acro_on_crafted_cells(acro):
    """Cells built to sit on either side of the (2, 0.9) and p = 0.1 boundaries."""
    cells = {
        "dominated": [1000, 900] + [10] * 18,  # top two 1900 of 2080: 91 %
        "balanced": [100] * 20,
        "p-percent": [1000, 10] + [5] * 18,  # remainder 90 < 0.1 * 1000
        "negative": [-5] + [50] * 19,
        "zeros": [0] * 20,
    }
    for name, values in cells.items():
        frame = pd.DataFrame({"g": ["a"] * 20 + ["b"] * 20, "v": values + [100] * 20})
        evaluated = evaluate({"type": "magnitude", "rows": "g", "value": "v"}, frame)
        acro.crosstab(frame["g"], pd.Series(["x"] * 40, name="h"), values=frame["v"], aggfunc="sum")
        assert check(evaluated).release == (acro_status(acro) == "pass"), name
        assert check(evaluated).release == (name == "balanced"), name


def test_regression_degrees_of_freedom_match_acro(data, acro):
    for size in (5, 12, 13, 14, 40):
        frame = data.iloc[:size]
        evaluated = evaluate(
            {
                "type": "regression",
                "outcome": "hpw",
                "predictors": ["age", "edu"],
                "where": {"age": {"between": [0, 100]}},
            },
            frame,
        )
        acro.ols(frame["hpw"], sm.add_constant(frame[["age", "edu"]]))
        assert evaluated.residual_dof == size - 3
        assert check(evaluated, ACRO_PARITY).release == (acro_status(acro) == "pass"), size
        if acro_status(acro) != "pass":  # the shipped rules are never laxer than acro's
            assert not check(evaluated).release, size


def test_extremes_are_never_released(data):
    """Decided on the spec alone: the analysis cannot run, and the error is not data-dependent, so
    the service counts no refusal and starts no cool-down."""
    for kind in ("min", "max"):
        with pytest.raises(AnalysisError, match="single record") as refused:
            evaluate({"type": kind, "column": "hpw"}, data)
        assert not refused.value.data_dependent


def test_single_cell_statistics(data):
    assert check(evaluate({"type": "mean", "column": "hpw"}, data)).release
    small = {"hpw": {"between": [98, 99]}}
    assert not check(evaluate({"type": "mean", "column": "hpw", "where": small}, data)).release
    result = evaluate({"type": "quantiles", "column": "age", "probabilities": [0.5]}, data).result
    assert result["quantiles"] == [float(np.quantile(data.age, 0.5))]


def test_classic_tracker_is_stopped(data):
    """Denning & Schlörer's individual tracker: count(A) - count(A and not B) = count(A and B),
    where A is large and A and B holds a single person. Each query alone passes output checking."""
    rare = int(data[data.sex == 1].hpw.value_counts().idxmin())
    a = {"sex": {"eq": 1}}
    a_not_b = {"sex": {"eq": 1}, "hpw": {"ne": rare}}
    target = int(((data.sex == 1) & (data.hpw == rare)).sum())
    assert 1 <= target < 10
    control = QuerySetControl(len(data))
    first = evaluate({"type": "count", "where": a}, data)
    second = evaluate({"type": "count", "where": a_not_b}, data)
    assert check(first).release and check(second).release
    assert control.violation(first.query_sets) is None
    control.record(first.query_sets)
    reason = control.violation(second.query_sets)
    assert reason is not None and f"differs from an earlier one by 0 and {target} record(s)" in reason


def test_query_set_size_rules():
    control = QuerySetControl(n_records=100, threshold=10)
    mask = np.zeros(100, dtype=bool)
    mask[:5] = True
    assert "fewer than 10" in control.violation([mask])
    assert "leaves out only 5" in control.violation([~mask])
    big = np.zeros(100, dtype=bool)
    big[:50] = True
    assert control.violation([big]) is None
    control.record([big])
    overlapping = big.copy()
    overlapping[50:52] = True
    assert "by 2 and 0 record(s)" in control.violation([overlapping])  # a tracker
    swapped = big.copy()
    swapped[[0, 1, 50, 51, 52]] = [False, False, True, True, True]
    assert "by 3 and 2 record(s)" in control.violation([swapped])  # a swap
    shifted = np.zeros(100, dtype=bool)
    shifted[20:80] = True
    assert control.violation([shifted]) is None
    one_sided = big.copy()
    one_sided[:12] = False
    one_sided[50:52] = True
    assert control.violation([one_sided]) is None  # 2 records against 12: no exact value follows


def test_specs_are_validated(data):
    with pytest.raises(AnalysisError, match="no column named 'salary'"):
        evaluate({"type": "mean", "column": "salary"}, data)
    with pytest.raises(AnalysisError, match="invalid analysis spec"):
        evaluate({"type": "mean"}, data)
    with pytest.raises(AnalysisError, match="invalid analysis spec"):
        evaluate({"type": "frequency", "rows": "sex", "code": "import os"}, data)
    with pytest.raises(AnalysisError, match="invalid analysis spec"):
        evaluate({"type": "mean", "column": "hpw", "where": {"age": {"like": "%"}}}, data)


def test_row_and_column_share_rule():
    """The paper's frequency-table rule (beyond acro): no cell above 90% of its row or column."""
    frame = pd.DataFrame({"a": [1] * 105 + [2] * 40, "b": [1] * 95 + [2] * 10 + [1] * 20 + [2] * 20})
    spec = {"type": "frequency", "rows": "a", "columns": "b"}
    evaluated = evaluate(spec, frame)  # row a=1: 95 of 105 in b=1 (90.5%); every cell >= 10
    assert check(evaluated, ACRO_PARITY).release  # acro's rules alone let it through
    decision = check(evaluated)
    assert not decision.release and decision.reasons == ("a cell holds more than 90% of its row or column",)
    balanced = pd.DataFrame({"a": [1] * 60 + [2] * 60, "b": ([1] * 30 + [2] * 30) * 2})
    assert check(evaluate(spec, balanced)).release
