"""Declarative statistical analyses, interpreted (never executed) by the data controller.

An analysis is a JSON object validated against ``protos/analysis.schema.json``; the README documents
the format. The interpreter computes the result on the controller's DataFrame together with what
output checking needs (Domingo-Ferrer, PSD 2022, Section 2 and 4.1): per-cell counts and
contributions for tables, residual degrees of freedom for regressions, and the query sets (record
masks) the analysis isolates, for query-set-size control.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources

import jsonschema
import numpy as np
import pandas as pd

SCHEMA = json.loads(resources.files("petlab.protos").joinpath("analysis.schema.json").read_text())
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


MAX_TABLE_CELLS = 1000  # larger tables are refused before they are computed
DISCRETE_LEVELS = 20  # a predictor with at most this many distinct values is treated as categorical


class AnalysisError(ValueError):
    """The spec is invalid or does not fit the data; the message says why, for a person."""


@dataclass
class Evaluated:
    """An analysis's result (not yet checked) and the evidence output checking needs."""

    kind: str
    result: dict  # JSON-ready, released only if the checks pass
    counts: pd.DataFrame | None = None  # records per cell (tables, means, quantiles)
    values: list[np.ndarray] = field(default_factory=list)  # per-cell contributions (magnitudes)
    residual_dof: int | None = None  # regressions
    query_sets: list[np.ndarray] = field(default_factory=list)  # boolean masks over the records
    never_release: str | None = None  # a rule that forbids this kind outright
    # quantiles: the probabilities asked for, and records strictly below / above each quantile
    probabilities: list[float] = field(default_factory=list)
    quantile_sides: list[tuple[int, int]] = field(default_factory=list)
    # regressions: the largest leverage h_ii, and the fewest records sharing one value of a
    # discrete predictor (at most DISCRETE_LEVELS distinct values in the query set)
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


def evaluate(spec: dict, data: pd.DataFrame) -> Evaluated:
    validate(spec, data)
    mask = selection(spec, data)
    subset = data[mask]
    kind = spec["type"]
    if kind in ("frequency", "magnitude"):
        return _table(spec, data, mask)
    if kind == "count":
        counts = pd.DataFrame({"count": [int(mask.sum())]})
        return Evaluated(kind, {"count": int(mask.sum())}, counts=counts, query_sets=[mask])
    column = spec.get("column")
    if kind == "mean":
        values = subset[column].to_numpy(dtype=float)
        return Evaluated(
            kind,
            {"mean": float(values.mean()) if len(values) else None, "n": len(values)},
            counts=pd.DataFrame({"count": [len(values)]}),
            values=[values],
            query_sets=[mask],
        )
    if kind == "quantiles":
        probabilities = spec["probabilities"]
        values = subset[column].to_numpy(dtype=float)
        quantiles = np.quantile(values, probabilities).tolist() if len(values) else []
        sides = [(int((values < q).sum()), int((values > q).sum())) for q in quantiles]
        return Evaluated(
            kind,
            {"probabilities": probabilities, "quantiles": quantiles, "n": len(values)},
            counts=pd.DataFrame({"count": [len(values)]}),
            query_sets=[mask],
            probabilities=[float(p) for p in probabilities],
            quantile_sides=sides,
        )
    if kind in ("min", "max"):
        return Evaluated(
            kind,
            {},
            query_sets=[mask],
            never_release=f"a {kind}imum is a single record's value and is never released",
        )
    if kind == "regression":
        return _regression(spec, subset, mask)
    raise AnalysisError(f"unknown analysis type {kind!r}")  # the schema makes this unreachable


def _table(spec: dict, data: pd.DataFrame, mask: np.ndarray) -> Evaluated:
    """One- or two-way table over the categories present in the whole data set (so a category absent
    from the query set shows as an empty, zero cell rather than disappearing).

    One pass of group-by: each record's cell index (row code x number of columns + column code,
    from ``pd.factorize``) gives counts and sums by ``np.bincount`` and the contributions per cell
    by one stable sort, O(N log N) in all instead of one scan of the data per cell. A table of more
    than ``MAX_TABLE_CELLS`` cells is refused before anything is computed (its cells would be
    small, and each one is a query set the control keeps)."""
    rows, cols = spec["rows"], spec.get("columns")
    row_codes, row_levels = _codes(data[rows])
    col_codes, col_levels = _codes(data[cols]) if cols else (np.zeros(len(data), dtype=np.int64), [None])
    n_cells = len(row_levels) * len(col_levels)
    if n_cells > MAX_TABLE_CELLS:
        raise AnalysisError(f"a table has at most {MAX_TABLE_CELLS} cells")
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
    if value_column:
        result.update({"value": value_column, "statistic": statistic})
    return Evaluated(spec["type"], result, counts=counts, values=values, query_sets=query_sets)


def _codes(column: pd.Series) -> tuple[np.ndarray, list]:
    """Each record's category index, and the categories in sorted order."""
    codes, levels = pd.factorize(column, sort=True)
    if (codes < 0).any():
        raise AnalysisError(f"column {column.name!r} has missing values and cannot be tabulated")
    return codes.astype(np.int64), levels.tolist()


def _regression(spec: dict, subset: pd.DataFrame, mask: np.ndarray) -> Evaluated:
    """Ordinary least squares with an intercept, by numpy's lstsq."""
    predictors = spec["predictors"]
    y = subset[spec["outcome"]].to_numpy(dtype=float)
    x = np.column_stack([np.ones(len(subset))] + [subset[p].to_numpy(dtype=float) for p in predictors])
    rank = int(np.linalg.matrix_rank(x)) if len(subset) else 0
    dof = len(subset) - rank
    coefficients = np.linalg.lstsq(x, y, rcond=None)[0].tolist() if len(subset) else []
    names = ["intercept", *predictors]
    return Evaluated(
        "regression",
        {"coefficients": dict(zip(names, coefficients, strict=False)), "n": len(subset), "residual_dof": dof},
        residual_dof=dof,
        query_sets=[mask],
        max_leverage=_max_leverage(x),
        rarest_predictor_value=_rarest_discrete_value(subset, predictors),
    )


def _max_leverage(x: np.ndarray) -> float:
    """The largest diagonal element of the hat matrix H = X (X^T X)^+ X^T: ||U_i||^2 over an
    orthonormal basis U of X's column space. h_ii = 1 means the fit passes through record i
    exactly, so its outcome can be read off the coefficients."""
    if x.shape[0] == 0:
        return 0.0
    u, singular, _ = np.linalg.svd(x, full_matrices=False)
    basis = u[:, singular > singular.max() * max(x.shape) * np.finfo(float).eps]
    return float((basis**2).sum(axis=1).max())


def _rarest_discrete_value(subset: pd.DataFrame, predictors: list[str]) -> int | None:
    """Fewest records holding one value of a discrete predictor (None when none is discrete): a
    value held by one record gives it its own coefficient-determined fit."""
    rarest = None
    for predictor in predictors:
        counts = subset[predictor].value_counts()
        if 0 < len(counts) <= DISCRETE_LEVELS:
            rarest = int(counts.min()) if rarest is None else min(rarest, int(counts.min()))
    return rarest
