"""The report of ``petlab-experiments all``: it opens with a short table of the results to look at
first and the plots; a plot has a panel only for a sweep that was run (no empty axes)."""

from __future__ import annotations

import pandas as pd
import pytest

from petlab.experiments import report
from petlab.experiments.knn_experiments import KNN_COLUMNS, SWEEP_COLUMNS


def _knn() -> pd.DataFrame:
    rows = []
    for dataset, seconds in (("iris", 1.59), ("wine", 2.4)):
        for protocol in ("clear", "HE k-NN thermo"):
            row = dict.fromkeys(KNN_COLUMNS, 1.0)
            row.update(dataset=dataset, protocol=protocol, queries=2, agrees_with_clear=1.0, median_s=seconds)
            row.update(bytes_up=1704, bytes_down=12539, key_bytes=39_981_824)
            rows.append(row)
    return pd.DataFrame(rows)[KNN_COLUMNS]


def _sweeps(*names: str) -> pd.DataFrame:
    rows = [
        dict.fromkeys(SWEEP_COLUMNS, 1.0) | {"sweep": name, name: value, "pbs_count": 10 * value}
        for name in names
        for value in (4, 6, 8)
    ]
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


def test_headlines_are_the_few_results_to_look_at():
    results = {
        "knn": _knn(),
        "knn_accuracy": pd.DataFrame(
            {"dataset": ["iris", "iris", "wine"], "accuracy": [0.9, 1.0, 0.8], "float_knn": [1.0, 1.0, 0.9]}
        ),
        "onthemap_commute": pd.DataFrame({"true_miles": [1.0, 2.0, 3.0], "synthetic_miles": [1.1, 2.0, 2.9]}),
        "plausible": pd.DataFrame({"data": ["reals", "omega=11"], "distinguish_rf": [0.5, 0.61]}),
    }
    lines = dict(report.headlines(results))
    assert lines["encrypted k-NN, median latency per query"] == "iris 1.6 s, wine 2.4 s (HE k-NN thermo)"
    assert lines["encrypted k-NN, cost of one query"] == (
        "iris: 1.7 kB up, 12.5 kB down, 40 MB of keys once; "
        "4 of 4 encrypted answers equal the clear reference"
    )
    assert lines["k-NN accuracy, owner's settings (float k-NN)"] == "iris 0.95 (1.00), wine 0.80 (0.90)"
    assert lines["OnTheMap synthetic commutes, eps 4.6"] == (
        "mean commute 2.0 mi true, 2.0 mi synthetic; per-destination correlation 1.00 over 3 destinations"
    )
    assert "61% of the time (50% is chance; omega=11)" in lines["plausible deniability, synthetic records"]
    assert report.headlines({}) == []


def test_the_report_opens_with_a_short_table_and_the_plots(tmp_path):
    figures = [tmp_path / "knn_latency.png", tmp_path / "knn_sweeps.png"]
    path = report.write_report({"knn": _knn()}, figures, tmp_path, "a machine", "quick")
    opening = path.read_text().split("## ")[0].splitlines()
    table = [line for line in opening if line.startswith("|")]
    assert table[0] == "| result | value |" and len(table) == 4  # header, rule, two results
    assert all(line.count("|") == 3 for line in table)  # two columns
    assert "![knn_latency](knn_latency.png)" in opening and "![knn_sweeps](knn_sweeps.png)" in opening


@pytest.mark.parametrize("sweeps", [("n",), ("n", "d", "k")])
def test_a_panel_for_each_sweep_run_and_no_empty_one(sweeps, tmp_path, monkeypatch):
    saved = {}

    def kept(figure, path, machine):
        saved[path.name] = figure
        return path

    monkeypatch.setattr(report, "_save", kept)
    report.knn_figures(_knn(), _sweeps(*sweeps), tmp_path, "a machine")
    figure = saved["knn_sweeps.png"]
    assert [axis.get_xlabel() for axis in figure.axes if axis.get_xlabel()] == list(sweeps)
    assert all(len(axis.lines[0].get_xdata()) == 3 for axis in figure.axes)  # every axis drawn on
