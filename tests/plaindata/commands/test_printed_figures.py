"""Every privacy figure ``petlab-synth`` and ``petlab-experiments`` print, grepped from their output
(cheap settings) and checked against the accountant.

A report is parsed into its tree of figures (indentation). Then each figure is recomputed from the
mechanism's parameters: a composed figure from its parts by the rule it names (sequential: sums;
parallel: maxima; "N x the part below, by optimal composition": dp_accounting's optimal
composition of the printed part, within the printing's rounding); Theorem 1 from k, gamma, eps0
and t; OnTheMap's eps' from Theorem 5.2 and Lemma 5.2 with the printed keep probability and prior;
the adaptive histograms from Corollary 2 and Theorem 3. Every top-level figure names its
neighbouring data sets. A figure with no rule to check it by fails the test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from petlab.plaindata.cli import main as synth_main
from petlab.plaindata.dp.composition import optimal_composition
from petlab.plaindata.dp.privacy_cost import delta_text, epsilon_text
from petlab.plaindata.onthemap.privacy import accept_reject_epsilon, shrunk_epsilon
from petlab.plaindata.plausible.privacy_tests import theorem1
from petlab.plaindata.plausible.run_bound import nothing_delta

FIGURE = re.compile(
    r"^(?P<indent> *)(?P<what>.+?): \((?P<symbol>epsilon'?) = (?P<eps>[0-9.]+)"
    r"(?:, delta = (?P<delta>[0-9.e+-]+))?\)-(?P<notion>DP|probabilistic DP)(?: \((?P<rule>.*)\))?$"
)
ROUND = 1e-4  # figures print with 4 decimals, rounded up


@dataclass
class Figure:
    what: str
    epsilon: float
    delta: float
    rule: str
    details: list[str] = field(default_factory=list)
    parts: list[Figure] = field(default_factory=list)


def parse(text: str) -> list[Figure]:
    """The figures of a privacy report, as a forest by indentation, with their detail lines."""
    roots: list[Figure] = []
    stack: list[tuple[int, Figure]] = []
    for line in text.splitlines():
        match = FIGURE.match(line)
        if not match:
            if stack and line.startswith(" " * (stack[-1][0] + 2)):
                stack[-1][1].details.append(line.strip())
            continue
        indent = len(match["indent"])
        figure = Figure(match["what"], float(match["eps"]), float(match["delta"] or 0), match["rule"] or "")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        (stack[-1][1].parts if stack else roots).append(figure)
        stack.append((indent, figure))
    return roots


def close(printed: float, value: float, slack: float = ROUND) -> bool:
    """Two printed figures that agree within their rounding."""
    return abs(printed - value) <= slack + 1e-12


def above(printed: float, value: float) -> bool:
    """A proven ``value`` printed with 4 decimals: rounded up, never below it."""
    return value - 1e-12 <= printed <= value + ROUND + 1e-12


def up(printed: float, value: float) -> bool:
    """A delta printed with 3 significant digits, rounded up."""
    return value * (1 - 1e-12) <= printed <= value * (1 + 1e-2) + 1e-300


def check_composition(figure: Figure) -> bool:
    """The figure from its parts by the rule it names; False when it names none of them."""
    parts = figure.parts
    if match := re.match(r"(\d+) x the part below, by sequential composition", figure.rule):
        (part,) = parts
        assert close(figure.epsilon, int(match[1]) * part.epsilon, ROUND * int(match[1])), figure
        assert figure.delta == pytest.approx(int(match[1]) * part.delta, rel=1e-2), figure
    elif "sequential composition" in figure.rule:
        assert close(figure.epsilon, sum(p.epsilon for p in parts), ROUND * (len(parts) + 1)), figure
        assert figure.delta == pytest.approx(sum(p.delta for p in parts), rel=1e-2), figure
    elif "parallel composition" in figure.rule:
        assert close(figure.epsilon, max(p.epsilon for p in parts)), figure
        assert figure.delta == pytest.approx(max(p.delta for p in parts), rel=1e-2), figure
    elif match := re.match(r"(\d+) x the part below, by optimal composition", figure.rule):
        (part,) = parts
        count = int(match[1])
        # deltas print rounded up to 3 digits: the slack delta' lies between these two
        most = figure.delta - count * part.delta / 1.01
        least = figure.delta / 1.01 - count * part.delta
        low = optimal_composition(part.epsilon - ROUND, count, most, part.delta / 1.01).epsilon
        assert low - ROUND <= figure.epsilon, figure
        if least > 0:
            high = optimal_composition(part.epsilon, count, least, part.delta).epsilon
            assert figure.epsilon <= high + ROUND, figure
        assert figure.epsilon <= count * (part.epsilon + ROUND), figure
    else:
        return False
    for part in parts:
        check(part)
    return True


def check(figure: Figure) -> None:
    if figure.parts:
        assert check_composition(figure), f"no rule to check {figure}"
        return
    if figure.rule.startswith("Theorem 1"):
        k, gamma, eps0, t = (float(v) for v in re.findall(r"= ([0-9.]+)", figure.rule))
        rho = float(re.search(r"abstention ([0-9.e-]+)", figure.rule)[1])
        bound = theorem1(int(k), gamma, eps0, int(t))
        nothing = nothing_delta(int(k), eps0, bound.epsilon, rho)
        assert above(figure.epsilon, bound.epsilon) and up(figure.delta, bound.delta + nothing), figure
    elif "Theorems 4.3 and 5.2" in figure.rule:
        text = "\n".join(figure.details)
        epsilon = float(re.search(r"priors for eps = ([0-9.]+)", text)[1])
        min_keep = float(re.search(r"min f = ([0-9.]+)", text)[1])
        ceil_alpha = int(re.search(r"max ceil\(alpha\) = (\d+)", text)[1])
        expected = shrunk_epsilon(accept_reject_epsilon(epsilon, figure.delta), min_keep, ceil_alpha)
        assert above(figure.epsilon, expected), figure
    elif figure.rule.startswith(("Laplace mechanism", "Corollary 2", "Theorem 3", "depth + 1")):
        pass  # a mechanism's own budget: checked against the command's arguments by the caller
    else:
        raise AssertionError(f"no rule to check {figure}")


def report_of(text: str) -> list[Figure]:
    assert "privacy report:" in text, text
    figures = parse(text.split("privacy report:", 1)[1])
    assert figures, text
    for figure in figures:
        assert "neighbours" in figure.what, f"the statement does not name its neighbours: {figure.what}"
        check(figure)
    return figures


def leaves(figures: list[Figure]) -> list[Figure]:
    return [leaf for f in figures for leaf in (leaves(f.parts) if f.parts else [f])]


@pytest.fixture(scope="module")
def lodes(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("lodes")
    assert synth_main(["commute-data", "--workers", "600", "--seed", "4", "--out", str(folder)]) == 0
    return ["--od", str(folder / "od_main_JT00.csv.gz"), "--xwalk", str(folder / "xwalk.csv.gz")]


def test_plausible_prints_only_checked_figures(tmp_path, capsys):
    argv = ["plausible", "--runs", "20", "--k", "30", "--omega", "11", "--seed", "1", "--model-eps", "0.8"]
    assert synth_main([*argv, "--out", str(tmp_path / "p.csv")]) == 0
    (whole,) = report_of(capsys.readouterr().out)
    assert whole.what.startswith("whole release") and "one record of the input" in whole.what
    structure, parameters, runs = whole.parts
    assert max(structure.epsilon, parameters.epsilon) <= 0.8 + ROUND  # the model's budget asked for
    assert runs.what.startswith("the 20 runs") and "20 x the part below" in runs.rule
    (record,) = runs.parts
    assert record.rule.startswith("Theorem 1") and "t = 9" in record.rule
    assert whole.epsilon == max(p.epsilon for p in whole.parts) > 20  # 20 runs of eps 1.37


def test_every_printed_bound_is_rounded_up():
    """Six figures whose nearest rounding lies below what was proven print at or above it."""
    cases = {
        1.129212: ("1.1293", None),
        7.5826e-10: (None, "7.59e-10"),
        2.0**-30: (None, "9.32e-10"),
        0.016526: ("0.0166", None),
        1 / 11: ("0.091", None),
        8.568603: ("8.5687", None),
    }
    for value, (epsilon, delta) in cases.items():
        if epsilon is not None:
            assert epsilon_text(value) == epsilon and float(epsilon) >= value
        if delta is not None:
            assert delta_text(value) == delta and float(delta) >= value
    for value in (1e-5, 0.5, 1.0, 3.0, 0.18393972058572117, 123.456789, 9.9999e-5):
        assert float(epsilon_text(value)) >= value and float(delta_text(value)) >= value
    assert (epsilon_text(2.0), delta_text(1e-5), delta_text(0.0)) == ("2", "1e-05", "0")


def test_onthemap_prints_only_checked_figures(lodes, tmp_path, capsys):
    assert synth_main(["onthemap", *lodes, "--seed", "1", "--out", str(tmp_path / "o.csv")]) == 0
    text = capsys.readouterr().out
    (figure,) = report_of(text)
    assert "one worker's origin moved within its destination" in figure.what and "N(d)" in figure.what
    assert "NOT covered: adding or removing a worker" in text
    assert figure.epsilon == 8.5687 and figure.delta == 1e-5  # 8.568603, rounded up


@pytest.mark.parametrize("method, expected", [("basic", 2 * 4 + 2), ("improved", 2 * 2 + 2), ("direct", 2)])
def test_adaptive_prints_only_checked_figures(lodes, tmp_path, capsys, method, expected):
    argv = ["adaptive", *lodes, "--seed", "1", "--method", method, "--eps", "2", "--depth", "4"]
    assert synth_main([*argv, "--out", str(tmp_path / "a.csv")]) == 0
    (figure,) = report_of(capsys.readouterr().out)
    assert close(figure.epsilon, expected) and figure.delta == 0
    budgets = {"basic": 2 * 4, "improved": 2 * 2, "direct": 2}  # Corollary 2, Theorem 3, Figures 3-4
    own = [leaf.epsilon for leaf in leaves([figure])]
    assert own == ([budgets[method], 2] if method != "direct" else [2])


def test_experiments_print_only_checked_figures(tmp_path, capsys):
    """``plausible-bench`` prints the command's statement; ``onthemap-bench`` the release's own
    statement (not its inputs); the checks of ``onthemap-figures`` and ``adaptive-counts`` are in
    ``test_experiments.py``, which runs them."""
    from petlab.experiments.cli import main as experiments_main
    from petlab.plaindata import acs_sample_path

    out = tmp_path / "bench.csv"
    argv = ["plausible-bench", "--data", str(acs_sample_path()), "--candidates", "500", "--k", "30"]
    assert experiments_main([*argv, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    figures = report_of("privacy report:\n" + text.split("what a release with this configuration states:")[1])
    assert len(figures) == 1 and figures[0].what.startswith("whole release: the model and the 500 runs")
    out = tmp_path / "otm.csv"
    argv = ["onthemap-bench", "--workers", "600", "--blocks", "300", "--out", str(out)]
    assert experiments_main(argv) == 0
    text = capsys.readouterr().out
    (figure,) = report_of(text.split("the release's own statement")[0])  # the command's report
    statement = pd.read_csv(out).statement[0]
    assert parse(statement)[0].epsilon == figure.epsilon and "neighbours" in statement
    assert f"the release's own statement: {statement}" in text
    assert not {"epsilon", "delta"} & set(pd.read_csv(out).columns)  # the inputs are named as inputs
    assert Path(out).exists()
