"""Output checking before anything is released (Domingo-Ferrer, PSD 2022, Section 2).

The rules and parameters are those of the SACRO project's ``acro`` package (its ``default.yaml``),
and the decisions equal acro's on the same tables (``tests/server/controller/test_output_checking.py``):

* minimum threshold: every cell counts at least ``threshold`` = 10 records;
* zeros are disclosive: an empty cell of a table is refused;
* (n, k) dominance, n = 2, k = 0.9: the two largest contributions of a magnitude cell must stay
  below 90 % of the cell total;
* p-percent (acro's p-ratio), p = 0.1: (total - two largest) / largest must be at least 0.1;
* dominance is undefined with negative contributions: refused (acro asks for a human review);
* regressions need at least ``dof_threshold`` = 10 residual degrees of freedom;
* minima and maxima are single records' values and are never released; quantiles (beyond acro)
  only at probabilities in ``quantile_probabilities`` (all strictly inside (0, 1); 0 and 1 are the
  minimum and maximum, and steps of 1/(n-1) would return every value of the set). Both are
  decided on the spec alone (``analyses.check_spec``): the analysis cannot run, which is no
  refusal (it counts against nobody and starts no cool-down); they are repeated here for library
  callers that evaluate without the server;
* quantiles (beyond acro): each quantile needs ``threshold`` records strictly below it and
  strictly above it, and its order statistics may not show an empty cell (``analyses``: the two
  order statistics an interpolated quantile is computed from are taken as released; a value of
  the set's definition between them is held by nobody in the set);
* two-way frequency tables (the paper's rule, beyond acro): no cell above ``row_column_share``
  = 90 % of its row's or its column's total;
* regressions (beyond acro): no leverage h_ii above ``max_leverage`` and no value of a binary
  predictor held by fewer than ``threshold`` records (each value of a binary predictor has its own
  fitted mean, intercept or intercept plus slope: held by one record, it is that record's
  outcome). A predictor with three or more values gives no group its own coefficient; what its
  sums pin (a three-valued predictor's level counts) the exact audit finds;
* shared values (beyond acro): a released sum or mean over two or more records that all
  hold the same value of its column, where the set's definition admits other values (a mean equal
  to the column's extreme over the set), shows a whole group sharing a value: a zero cell (the
  records of the set with any other value are none), refused like acro's empty cells
  (``shared_values_disclosive``).

What the analysis adds to everything released before (differencing, groups determined by several
analyses, equal sets with different definitions) is decided by ``release_history``.

Every reason below states an exact figure; reasons go to the controller's log only. The analyst is
told the category ("withheld: disclosure control", ``service``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from petlab.server.controller.analyses import QUANTILE_PROBABILITIES, Evaluated


@dataclass(frozen=True)
class Rules:
    threshold: int = 10
    dof_threshold: int = 10
    nk_n: int = 2
    nk_k: float = 0.9
    p_ratio: float = 0.1
    zeros_disclosive: bool = True
    quantile_probabilities: tuple[float, ...] = QUANTILE_PROBABILITIES
    max_leverage: float = 0.5
    rare_predictor_values: bool = True
    row_column_share: float = 0.9  # the paper's rule for two-way frequency tables
    shared_values_disclosive: bool = True  # a released mean equal to its set's extreme


# acro's own rules alone (what the differential tests compare against): no quantile, regression
# or row/column-share rules beyond the residual degrees of freedom.
ACRO_PARITY = Rules(
    max_leverage=1.0, rare_predictor_values=False, row_column_share=1.0, shared_values_disclosive=False
)


@dataclass(frozen=True)
class Decision:
    release: bool
    reasons: tuple[str, ...]


def check(evaluated: Evaluated, rules: Rules = Rules()) -> Decision:
    reasons: list[str] = []
    if evaluated.never_release:
        reasons.append(evaluated.never_release)
    if evaluated.shared_value and rules.shared_values_disclosive:
        reasons.append(f"zero cell: {evaluated.shared_value}")
    if evaluated.order_gap:
        reasons.append(f"zero cell: {evaluated.order_gap}")
    if evaluated.counts is not None:
        counts = evaluated.counts.to_numpy()
        small = int((counts < rules.threshold).sum())
        if small:
            reasons.append(f"{small} cell(s) count fewer than {rules.threshold} records")
        if rules.zeros_disclosive and (counts == 0).any():
            reasons.append(f"{int((counts == 0).sum())} cell(s) are empty, and zeros are disclosive")
        if evaluated.kind == "frequency" and counts.ndim == 2 and min(counts.shape) > 1:
            reasons += _row_column_shares(counts, rules)
    for contributions in evaluated.values:
        reasons += _dominance(contributions, rules)
    for p in evaluated.probabilities:
        if not 0 < p < 1 or not any(abs(p - allowed) < 1e-12 for allowed in rules.quantile_probabilities):
            reasons.append(f"quantile probability {p} is not one of {list(rules.quantile_probabilities)}")
    for below, above in evaluated.quantile_sides:
        if min(below, above) < rules.threshold:
            reasons.append(
                f"a quantile has {min(below, above)} record(s) on one side, fewer than {rules.threshold}"
            )
    if evaluated.max_leverage is not None and evaluated.max_leverage > rules.max_leverage:
        reasons.append(f"a record has leverage {evaluated.max_leverage:.3f} > {rules.max_leverage}")
    rarest = evaluated.rarest_predictor_value
    if rules.rare_predictor_values and rarest is not None and rarest < rules.threshold:
        reasons.append(f"a predictor value is held by {rarest} record(s), fewer than {rules.threshold}")
    if evaluated.residual_dof is not None and evaluated.residual_dof < rules.dof_threshold:
        reasons.append(
            f"the regression has {evaluated.residual_dof} residual degrees of freedom, "
            f"fewer than {rules.dof_threshold}"
        )
    return Decision(not reasons, tuple(dict.fromkeys(reasons)))


def _row_column_shares(counts: np.ndarray, rules: Rules) -> list[str]:
    """Domingo-Ferrer (PSD 2022, Section 2): in a two-way frequency table no cell may hold more
    than ``row_column_share`` of its row's or its column's total (it would nearly reveal the
    attribute of everyone in that row or column)."""
    counts = counts.astype(float)
    rows, columns = counts.sum(axis=1, keepdims=True), counts.sum(axis=0, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.fmax(np.where(rows > 0, counts / rows, 0), np.where(columns > 0, counts / columns, 0))
    if (share > rules.row_column_share).any():
        return [f"a cell holds more than {rules.row_column_share:.0%} of its row or column"]
    return []


def cell_dominance_flags(contributions: np.ndarray, rules: Rules = Rules()) -> tuple[bool, bool, bool]:
    """(negative present, n-k dominance fails, p-ratio fails) for one cell, computed as acro does."""
    values = np.asarray(contributions, dtype=float)
    if (values < 0).any():
        return True, False, False
    total = values.sum()
    ordered = np.sort(values)[::-1]
    top_n = ordered[: rules.nk_n].sum()
    nk_fails = bool(total > 0 and top_n / total >= rules.nk_k)  # 0/0 is NaN in acro: passes
    top1 = ordered[0] if len(ordered) else 0.0
    remainder = total - ordered[:2].sum()
    p_value = remainder if top1 == 0 else remainder / top1
    return False, nk_fails, bool(len(values) > 0 and p_value < rules.p_ratio)


def _dominance(contributions: np.ndarray, rules: Rules) -> list[str]:
    negative, nk_fails, p_fails = cell_dominance_flags(contributions, rules)
    reasons = []
    if negative:
        reasons.append("a cell has negative contributions, so dominance is undefined")
    if nk_fails:
        reasons.append(
            f"a cell is dominated: its {rules.nk_n} largest contributions make "
            f"{rules.nk_k:.0%} or more of its total"
        )
    if p_fails:
        reasons.append(f"a cell fails the p-percent rule (p = {rules.p_ratio})")
    return reasons
