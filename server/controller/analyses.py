"""Declarative statistical analyses, interpreted (never executed) by the data controller.

An analysis is a JSON object validated against ``protos/analysis.schema.json``;
docs/reference/file-formats.md ("Analyses") documents the format. The interpreter computes the result on the
controller's DataFrame together with what output checking needs (Domingo-Ferrer, PSD 2022, Section 2
and 4.1): per-cell counts and contributions for tables, residual degrees of freedom for regressions,
and what the analysis reveals as linear functionals of the records, for the audit of everything
released (``release_audit``):

================  ===========================================================================
statistic         released functionals (weight vectors over the records)
================  ===========================================================================
count over S      1_S (the count)
mean of y over S  1_S and y . 1_S: the count n and the sum n * mean. The sum is audited as the
                  *weighted* functional y . 1_S too, not only as S's sum: where y takes few
                  values it is a count of a finer set (the mean of sex, 1 or 2, over S is
                  1 + women / n; the mean of hours over `hpw between [h, h + 1]` counts the
                  records at h + 1), and a set defined by y's value pins y on it
quantiles         1_S (n), and each quantile q's sides S and y < q, S and y > q: np.quantile
                  interpolates, so a quantile strictly between two adjacent values says
                  exactly how many records lie below it (audited as those sets whether or not
                  it interpolates). The values are order statistics, not linear: the quantile
                  at p is x_(k) + f (x_(k+1) - x_(k)) with k = floor((n - 1) p) and f its
                  fraction (numpy's "linear" method, Hyndman and Fan's type 7), and two such
                  releases solve for the pair (38.2 at f = 0.1 and 38.5 at f = 0.25 give 38
                  and 40). They are audited as released values: both order statistics are
                  taken as known, so a value of the set's definition strictly between them is
                  held by no record of the set, a zero cell, refused as acro refuses empty
                  cells (``Evaluated.order_gap``); besides, t records strictly on each side
frequency table   1_cell for every cell (cell = S and the row level and the column level)
magnitude table   1_cell and y . 1_cell per cell (a cell mean is taken to release its count too)
min, max          nothing: never run (a spec error, decided on the spec alone)
regression        n = 1_S and the sums its coefficients are built from (its sufficient
                  statistics), X^T 1_S, X^T X and X^T y: the weighted sets x . 1_S for every
                  predictor x, y . 1_S, and the products as weighted functionals
                  (x1*x2) . 1_S for every pair of predictors, x^2 and x y for every x
                  (``_products``). Each predictor enters the fit as one numeric column, so
                  these are all the coefficients are computed from; the audit, which splits
                  the atoms by the weights' values, finds what they pin: a binary x's two
                  subgroup counts and sums (intercept and slope are the two subgroup means),
                  a three-valued x's level counts (x^0, x^1, x^2 over three values)
================  ===========================================================================

A future statistic names its functionals here, beside its evaluation; a non-linear one also
names the rule that covers what is not linear in it.

Each query set carries its *definition* (``Evaluated.definitions``): per column, the values present
in the data that the set admits (columns that admit every value are left out), as canonical JSON.
Two released sets with the same records and different definitions show an empty cell
(``release_history``).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from importlib import resources

import jsonschema
import numpy as np
import pandas as pd

from petlab.errors import BadInput
from petlab.server.controller.public_domain import PublicDomain, label
from petlab.server.controller.release_audit import PRODUCT

SCHEMA = json.loads(resources.files("petlab.protos").joinpath("analysis.schema.json").read_text())
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


MAX_TABLE_CELLS = 1000  # larger tables are refused before they are computed
# the quantile probabilities an analysis may ask for (``Rules.quantile_probabilities``): 0 and 1 are
# the minimum and the maximum, and steps of 1 / (n - 1) would return every value of the set
QUANTILE_PROBABILITIES = (0.1, 0.25, 0.5, 0.75, 0.9)


class AnalysisError(BadInput, ValueError):
    """The spec is invalid or does not fit the data; the message says why, for a person.

    ``data_dependent``: whether the error depends on the records (a table with too many distinct
    values, missing values), not only on the spec and the public schema; such an error tells the
    analyst something about the data, and counts as a refusal (``service``)."""

    def __init__(self, message: str, data_dependent: bool = False):
        super().__init__(message)
        self.data_dependent = data_dependent


@dataclass
class Evaluated:
    """An analysis's result (not yet checked) and the evidence output checking needs."""

    kind: str
    result: dict  # JSON-ready, released only if the checks pass
    counts: pd.DataFrame | None = None  # records per cell (tables, means, quantiles)
    values: list[np.ndarray] = field(default_factory=list)  # per-cell contributions (magnitudes)
    residual_dof: int | None = None  # regressions
    query_sets: list[np.ndarray] = field(default_factory=list)  # boolean masks over the records
    definitions: list[str] = field(default_factory=list)  # each query set's definition (module doc)
    # (query set, weighing column): the sum of that column over that query set is released
    weighted: list[tuple[int, str]] = field(default_factory=list)
    # a released sum or mean over a set of two or more records that all share the value, where the
    # set's definition admits other values: the release shows a whole group sharing a value
    shared_value: str | None = None
    # a released quantile's order statistics leave a value of the set's definition between them
    # that no record of the set holds (module docstring): a zero cell
    order_gap: str | None = None
    never_release: str | None = None  # a rule that forbids this kind outright
    # quantiles: the probabilities asked for, and records strictly below / above each quantile
    probabilities: list[float] = field(default_factory=list)
    quantile_sides: list[tuple[int, int]] = field(default_factory=list)
    # regressions: the largest leverage h_ii, and the fewest records sharing one value of a
    # binary predictor (two values in the query set: each value's group has its own fitted mean)
    max_leverage: float | None = None
    rarest_predictor_value: int | None = None


def validate(spec: dict, data: pd.DataFrame) -> None:
    errors = sorted(_VALIDATOR.iter_errors(spec), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].path) or "the spec"
        raise AnalysisError(f"invalid analysis spec at {where}: {errors[0].message}")
    columns = [spec.get(k) for k in ("rows", "columns", "value", "column", "outcome")]
    columns += spec.get("predictors", []) + list(spec.get("where", {}))
    for column in filter(None, columns):
        if column not in data.columns:
            raise AnalysisError(f"no column named {column!r}; the data has {', '.join(data.columns)}")
    for column in filter(
        None, [spec.get(k) for k in ("value", "column", "outcome")] + spec.get("predictors", [])
    ):
        if not pd.api.types.is_numeric_dtype(data[column]):
            raise AnalysisError(f"column {column!r} is not numeric")


def selection(spec: dict, data: pd.DataFrame) -> np.ndarray:
    """The records the ``where`` clause selects (a conjunction of conditions)."""
    mask = np.ones(len(data), dtype=bool)
    for column, condition in spec.get("where", {}).items():
        values = data[column]
        if "eq" in condition:
            mask &= (values == condition["eq"]).to_numpy()
        if "ne" in condition:
            mask &= (values != condition["ne"]).to_numpy()
        if "in" in condition:
            mask &= values.isin(condition["in"]).to_numpy()
        if "between" in condition:
            low, high = condition["between"]
            mask &= values.between(low, high).to_numpy()
    return mask


def admitted(spec: dict, domains: dict[str, list]) -> dict[str, list]:
    """Per column of the ``where`` clause, the values present in the data that it admits (the
    conditions applied to the column's distinct values, as :func:`selection` applies them to the
    records)."""
    out = {}
    for column, condition in spec.get("where", {}).items():
        distinct = pd.DataFrame({column: domains[column]})
        out[column] = distinct[column][selection({"where": {column: condition}}, distinct)].tolist()
    return out


def domains_of(spec: dict, data: pd.DataFrame, domain: PublicDomain | None = None) -> dict[str, list]:
    """Every column the spec names with its domain: the public one (``public_domain``, what the
    server uses), else the distinct values present in the data (library use on synthetic data
    only: definitions then compare by values present, a figure of the records)."""
    named = {spec.get(k) for k in ("rows", "columns", "value", "column", "outcome")}
    named |= set(spec.get("predictors", [])) | set(spec.get("where", {}))
    if domain is not None:
        return {c: list(domain.values[c]) for c in sorted(filter(None, named))}
    return {c: pd.unique(data[c]).tolist() for c in sorted(filter(None, named))}


def definition(admits: dict[str, list], domains: dict[str, list], fixed: dict | None = None) -> str:
    """Canonical JSON of a query set's definition: per column, the admitted values present in the
    data, leaving out the columns that admit every value present."""
    columns = dict(admits)
    for column, value in (fixed or {}).items():
        columns[column] = [v for v in columns.get(column, domains[column]) if _label(v) == _label(value)]
    described = {}
    for column, values in columns.items():
        labels = sorted({_label(v) for v in values})
        if len(labels) < len(domains[column]):
            described[column] = labels
    return json.dumps(described, sort_keys=True, separators=(",", ":"))


_label = label


def _shared_value(
    mask: np.ndarray,
    data: pd.DataFrame,
    columns: list[str],
    admits: dict[str, list],
    domains: dict[str, list],
) -> str | None:
    """Whether a released sum or mean over ``mask`` shows that all its records (two or more) share
    one value of a column that the set's definition does not fix to that value."""
    if mask.sum() < 2:
        return None
    for column in columns:
        if pd.Series(data[column].to_numpy()[mask]).nunique(dropna=False) != 1:
            continue
        possible = admits.get(column, domains[column])
        if len({_label(v) for v in possible}) > 1:
            return f"all {int(mask.sum())} records of a released set share one value of {column}"
    return None


def check_spec(spec: dict, probabilities: tuple[float, ...] = QUANTILE_PROBABILITIES) -> None:
    """Raise :class:`AnalysisError` (not data-dependent) for a spec the rules refuse whatever the
    records hold: a minimum or maximum (a single record's value), a quantile probability outside
    ``probabilities``. Such a refusal tells nothing about the data, so it is no refusal: it starts
    no cool-down and counts against nobody's budget (``service``)."""
    kind = spec.get("type")
    if kind in ("min", "max"):
        raise AnalysisError(f"a {kind}imum is a single record's value and is never released")
    if kind == "quantiles":
        for p in spec.get("probabilities", []):
            if not 0 < p < 1 or not any(abs(p - allowed) < 1e-12 for allowed in probabilities):
                raise AnalysisError(f"quantile probability {p} is not one of {list(probabilities)}")


def evaluate(
    spec: dict,
    data: pd.DataFrame,
    domain: PublicDomain | None = None,
    allowed_probabilities: tuple[float, ...] = QUANTILE_PROBABILITIES,
) -> Evaluated:
    """Interpret ``spec`` on ``data``. ``domain``: the public attribute domain definitions and table
    levels are taken from (``public_domain``; the server always gives one).
    ``allowed_probabilities``: the quantile probabilities the rules allow (``check_spec``)."""
    validate(spec, data)
    check_spec(spec, allowed_probabilities)
    mask = selection(spec, data)
    subset = data[mask]
    kind = spec["type"]
    domains = domains_of(spec, data, domain)
    admits = admitted(spec, domains)
    if kind in ("frequency", "magnitude"):
        return _table(spec, data, mask, admits, domains, domain is not None)
    described = [definition(admits, domains)]
    if kind == "count":
        counts = pd.DataFrame({"count": [int(mask.sum())]})
        return Evaluated(
            kind, {"count": int(mask.sum())}, counts=counts, query_sets=[mask], definitions=described
        )
    column = str(spec.get("column"))
    if kind == "mean":
        values = subset[column].to_numpy(dtype=float)
        return Evaluated(
            kind,
            {"mean": float(values.mean()) if len(values) else None, "n": len(values)},
            counts=pd.DataFrame({"count": [len(values)]}),
            values=[values],
            query_sets=[mask],
            definitions=described,
            weighted=[(0, column)],
            shared_value=_shared_value(mask, data, [column], admits, domains),
        )
    if kind == "quantiles":
        probabilities = spec["probabilities"]
        values = subset[column].to_numpy(dtype=float)
        quantiles = np.quantile(values, probabilities).tolist() if len(values) else []
        sides = [(int((values < q).sum()), int((values > q).sum())) for q in quantiles]
        gap = _order_gap(values, probabilities, admits.get(column, domains[column]))
        query_sets, definitions = _quantile_sides(mask, data[column], quantiles, admits, domains, column)
        return Evaluated(
            kind,
            {"probabilities": probabilities, "quantiles": quantiles, "n": len(values)},
            counts=pd.DataFrame({"count": [len(values)]}),
            query_sets=[mask, *query_sets],
            definitions=described + definitions,
            probabilities=[float(p) for p in probabilities],
            quantile_sides=sides,
            order_gap=gap,
        )
    if kind == "regression":
        return _regression(spec, data, mask, admits, domains)
    raise AnalysisError(f"unknown analysis type {kind!r}")  # the schema makes this unreachable


def _order_gap(values: np.ndarray, probabilities: list[float], possible: list) -> str | None:
    """Whether a quantile's order statistics show an empty cell (module docstring): numpy's linear
    method gives x_(k) + f (x_(k+1) - x_(k)), k = floor((n - 1) p); both order statistics it uses
    are taken as released, and a value the set's definition admits strictly between x_(k) and
    x_(k+1) is then held by no record of the set."""
    if not len(values):
        return None
    ordered = np.sort(values)
    admitted = np.array(sorted(float(v) for v in possible))
    for p in probabilities:
        k = int(np.floor((len(ordered) - 1) * p))
        low, high = ordered[k], ordered[min(k + 1, len(ordered) - 1)]
        between = int(((admitted > low) & (admitted < high)).sum())
        if between:
            return (
                f"the order statistics of the {p} quantile, {low:g} and {high:g}, are adjacent in the "
                f"set: {between} value(s) between them are held by no record"
            )
    return None


def _quantile_sides(
    mask: np.ndarray,
    column: pd.Series,
    quantiles: list[float],
    admits: dict[str, list],
    domains: dict[str, list],
    name: str,
) -> tuple[list[np.ndarray], list[str]]:
    """Each quantile's sides as query sets with their definitions: the records of S strictly below
    it and strictly above it (module docstring: an interpolated quantile counts them exactly)."""
    values = column.to_numpy(dtype=float)
    possible = admits.get(name, domains[name])
    query_sets, definitions = [], []
    for q in quantiles:
        for side in (np.less, np.greater):
            query_sets.append(mask & side(values, q))
            kept = [v for v in possible if side(float(v), q)]
            definitions.append(definition({**admits, name: kept}, domains))
    return query_sets, definitions


def _table(
    spec: dict,
    data: pd.DataFrame,
    mask: np.ndarray,
    admits: dict[str, list],
    domains: dict[str, list],
    public: bool = False,
) -> Evaluated:
    """One- or two-way table over the categories present in the whole data set (so a category absent
    from the query set shows as an empty, zero cell rather than disappearing).

    One pass of group-by: each record's cell index (row code x number of columns + column code,
    from ``pd.factorize``) gives counts and sums by ``np.bincount`` and the contributions per cell
    by one stable sort, O(N log N) in all instead of one scan of the data per cell. A table of more
    than ``MAX_TABLE_CELLS`` cells is refused before anything is computed (its cells would be
    small, and each one is a query set the control keeps).

    ``public``: the levels are the public domain's (``domains``), so which levels the data holds is
    never shown by the list of cells (an absent level is an empty cell, which output checking
    refuses) and the cell cap depends on the domain only."""
    rows, cols = spec["rows"], spec.get("columns")
    levels_of = (lambda c: domains[c]) if public else (lambda c: None)
    if public:
        domain_cells = len(domains[rows]) * (len(domains[cols]) if cols else 1)
        if domain_cells > MAX_TABLE_CELLS:
            raise AnalysisError(f"a table has at most {MAX_TABLE_CELLS} cells")
    row_codes, row_levels = _codes(data[rows], levels_of(rows))
    col_codes, col_levels = (
        _codes(data[cols], levels_of(cols)) if cols else (np.zeros(len(data), dtype=np.int64), [None])
    )
    n_cells = len(row_levels) * len(col_levels)
    if n_cells > MAX_TABLE_CELLS:
        raise AnalysisError(f"a table has at most {MAX_TABLE_CELLS} cells", data_dependent=True)
    cell_of = row_codes * len(col_levels) + col_codes
    selected = cell_of[mask]
    count_of = np.bincount(selected, minlength=n_cells)
    counts = pd.DataFrame(
        count_of.reshape(len(row_levels), len(col_levels)),
        index=row_levels,
        columns=[str(c) for c in col_levels],
        dtype=np.int64,
    )
    query_sets = [mask & (cell_of == cell) for cell in range(n_cells)]
    definitions = [
        definition(admits, domains, {rows: r} if cols is None else {rows: r, cols: c})
        for r in row_levels
        for c in col_levels
    ]
    keys = [f"{r}" if cols is None else f"{r}|{c}" for r in row_levels for c in col_levels]
    value_column = spec.get("value")
    statistic = spec.get("statistic", "sum")
    values: list[np.ndarray] = []
    cells: dict[str, float | int | None] = {}
    if value_column:
        contributions = data[value_column].to_numpy(dtype=float)[mask]
        order = np.argsort(selected, kind="stable")
        values = np.split(contributions[order], np.cumsum(count_of)[:-1])
        totals = np.bincount(selected, weights=contributions, minlength=n_cells)
        for key, total, count in zip(keys, totals, count_of, strict=True):
            cells[key] = float(total) if statistic == "sum" else (float(total) / count if count else None)
    else:
        cells = {key: int(count) for key, count in zip(keys, count_of, strict=True)}
    result = {"rows": rows, "columns": cols, "cells": cells}
    shared = None
    if value_column:
        result.update({"value": value_column, "statistic": statistic})
        cell_admits = [
            {**admits, rows: [r]} if cols is None else {**admits, rows: [r], cols: [c]}
            for r in row_levels
            for c in col_levels
        ]
        for cell, (contributions, cell_admit) in enumerate(zip(values, cell_admits, strict=True)):
            if len(contributions) >= 2 and np.all(contributions == contributions[0]):
                shared = _shared_value(query_sets[cell], data, [value_column], cell_admit, domains)
                if shared:
                    break
    return Evaluated(
        spec["type"],
        result,
        counts=counts,
        values=values,
        query_sets=query_sets,
        definitions=definitions,
        weighted=[(cell, value_column) for cell in range(n_cells)] if value_column else [],
        shared_value=shared,
    )


def _codes(column: pd.Series, levels: list | None = None) -> tuple[np.ndarray, list]:
    """Each record's category index, and the categories: ``levels`` (the public domain's) when
    given, else those present, in sorted order."""
    if levels is not None:
        index = {label(v): i for i, v in enumerate(levels)}
        distinct, inverse = np.unique(column.to_numpy(), return_inverse=True)
        codes = np.array([index.get(label(v), -1) for v in distinct], dtype=np.int64)[inverse.ravel()]
        if (codes < 0).any():  # the server checks the data against its domain at start
            raise AnalysisError(f"column {column.name!r} holds a value outside its public domain")
        return codes, list(levels)
    codes, present = pd.factorize(column, sort=True)
    if (codes < 0).any():
        raise AnalysisError(
            f"column {column.name!r} has missing values and cannot be tabulated", data_dependent=True
        )
    return codes.astype(np.int64), present.tolist()


def _regression(
    spec: dict, data: pd.DataFrame, mask: np.ndarray, admits: dict[str, list], domains: dict[str, list]
) -> Evaluated:
    """Ordinary least squares with an intercept, by numpy's lstsq. What it reveals (module
    docstring): n, and the sums X^T 1_S, X^T X, X^T y its coefficients are built from; audited as
    the query set S and the weighted sets x . 1_S, y . 1_S and the products (``_products``)."""
    subset = data[mask]
    predictors = spec["predictors"]
    y = subset[spec["outcome"]].to_numpy(dtype=float)
    x = np.column_stack([np.ones(len(subset))] + [subset[p].to_numpy(dtype=float) for p in predictors])
    rank = int(np.linalg.matrix_rank(x)) if len(subset) else 0
    dof = len(subset) - rank
    coefficients = np.linalg.lstsq(x, y, rcond=None)[0].tolist() if len(subset) else []
    names = ["intercept", *predictors]
    query_sets, definitions = [mask], [definition(admits, domains)]
    weighted = [(0, predictor) for predictor in predictors] + [(0, spec["outcome"])]
    weighted += [(0, PRODUCT.join(pair)) for pair in _products(predictors, spec["outcome"])]
    shared = _shared_value(mask, data, [spec["outcome"], *predictors], admits, domains)
    return Evaluated(
        "regression",
        {"coefficients": dict(zip(names, coefficients, strict=False)), "n": len(subset), "residual_dof": dof},
        residual_dof=dof,
        query_sets=query_sets,
        definitions=definitions,
        weighted=weighted,
        shared_value=shared,
        max_leverage=_max_leverage(x),
        rarest_predictor_value=_rarest_binary_value(subset, predictors),
    )


def _products(predictors: list[str], outcome: str) -> list[tuple[str, str]]:
    """The products of columns whose sums over S a regression releases: X^T X's x_j x_l for every
    pair of predictors (for two discrete predictors a combination of their cross cells: with the
    margins and a few cells, the coefficients give a cross cell of fewer than t records) and x^2
    for every x, and X^T y's x y for every x."""
    pairs = list(itertools.combinations(predictors, 2))
    pairs += [(x, x) for x in predictors] + [(x, outcome) for x in predictors]
    return pairs


def _max_leverage(x: np.ndarray) -> float:
    """The largest diagonal element of the hat matrix H = X (X^T X)^+ X^T: ||U_i||^2 over an
    orthonormal basis U of X's column space. h_ii = 1 means the fit passes through record i
    exactly, so its outcome can be read off the coefficients."""
    if x.shape[0] == 0:
        return 0.0
    u, singular, _ = np.linalg.svd(x, full_matrices=False)
    basis = u[:, singular > singular.max() * max(x.shape) * np.finfo(float).eps]
    return float((basis**2).sum(axis=1).max())


def _rarest_binary_value(subset: pd.DataFrame, predictors: list[str]) -> int | None:
    """Fewest records holding one value of a binary predictor (two values in the set; None when
    there is none): the group holding a value of a binary x has its own fitted mean (intercept,
    intercept plus slope), so a value held by one record gives that record's outcome. A predictor
    with more values gives no group its own coefficient (a rare value's records are points of
    one line), and what its sums pin the audit finds (module docstring)."""
    rarest = None
    for predictor in predictors:
        counts = subset[predictor].value_counts()
        if len(counts) == 2:
            rarest = int(counts.min()) if rarest is None else min(rarest, int(counts.min()))
    return rarest
