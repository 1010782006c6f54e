"""An attacker's reconstruction against the controller's release decisions: one analyst, then a
coalition.

Hypothesis draws a small random data set and a random sequence of analyses (counts, means, one- and
two-way frequency and magnitude tables, each under a random ``where``). Every analysis goes through
the controller's own decision (:func:`refusal_reason`: output checking, query-set-size control and
the history audit); what is released is kept, what is refused is skipped and the attacker simply
goes on (stronger than the service, which ends the session at the first refusal). The attacker then
writes every released sum as a linear equation over the records' sensitive values (a mean times its
released n is a sum; a table's cell mean times its cell count is a sum) and asks, record by record,
whether those equations determine the record's value: e_j lies in the row space of the equation
matrix exactly when adding e_j as a row leaves the rank unchanged. The rank is computed in exact
rational arithmetic (fraction-free Gaussian elimination over the integers), independently of the
controller's audit (which works modulo random primes). No record may be determined.

Without the history audit hypothesis found a sequence that exposes a record; it is kept as an
explicit example (``test_the_attack_finds_leaks_without_the_audit``), so the main test can fail.

The second half of this file: a coalition of two identities, whose releases the attacker
pools, draws regressions (a binary predictor: intercept and slope are the two subgroup means),
ill-conditioned families of means over unions of levels in a triangular pattern, and the usual
analyses, on data sets of 40 to 60 records under the default threshold t = 10; the attacker asks, in
exact rationals, whether the pooled releases determine the count or sum of any group of 1 to 9
records (every atom and every union of up to three atoms). Each protection has an explicit example
that leaks when it is switched off.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from itertools import combinations
from math import gcd

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from petlab.server.controller.analyses import AnalysisError, evaluate
from petlab.server.controller.output_checking import Rules
from petlab.server.controller.release_audit import ReleaseAudit
from petlab.server.controller.release_history import ReleaseHistory
from petlab.server.controller.service import refusal_reason

CATEGORIES = {"a": 3, "b": 2, "c": 4}
RULES = Rules(threshold=3, dof_threshold=3)


@st.composite
def data_sets(draw) -> pd.DataFrame:
    n = draw(st.integers(24, 40))
    columns = {
        name: draw(st.lists(st.integers(0, levels - 1), min_size=n, max_size=n))
        for name, levels in CATEGORIES.items()
    }
    columns["v"] = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    return pd.DataFrame(columns)


@st.composite
def analyses(draw) -> dict:
    where = {}
    for name in draw(st.sets(st.sampled_from(sorted(CATEGORIES)), max_size=2)):
        levels = draw(st.sets(st.integers(0, CATEGORIES[name] - 1), min_size=1))
        where[name] = {"in": sorted(levels)}
    kind = draw(st.sampled_from(["count", "mean", "frequency", "magnitude"]))
    spec: dict = {"type": kind}
    if kind == "mean":
        spec["column"] = "v"
    if kind in ("frequency", "magnitude"):
        spec["rows"] = draw(st.sampled_from(sorted(CATEGORIES)))
        if draw(st.booleans()):
            spec["columns"] = draw(st.sampled_from(sorted(set(CATEGORIES) - {spec["rows"]})))
    if kind == "magnitude":
        spec["value"] = "v"
        spec["statistic"] = draw(st.sampled_from(["sum", "mean"]))
    if where:
        spec["where"] = where
    return spec


def released_equations(
    data: pd.DataFrame, specs: list[dict], rules: Rules = RULES
) -> tuple[list[np.ndarray], list[Fraction]]:
    """Run ``specs`` through the controller's decision; the released sums as (set, value) rows."""
    history = ReleaseHistory(data, rules)
    rows, sums = [], []
    for spec in specs:
        evaluated = released(spec, data, history)
        if evaluated is not None:
            add_released_sums(evaluated, rows, sums)
    return rows, sums


def released(spec: dict, data: pd.DataFrame, history: ReleaseHistory):
    """The evaluated analysis if the controller's decision releases it (recorded), else None."""
    try:
        evaluated = evaluate(spec, data)
    except AnalysisError:
        return None
    if refusal_reason(evaluated, history):
        return None
    history.record(evaluated)
    return evaluated


def add_released_sums(evaluated, rows: list[np.ndarray], sums: list[Fraction]) -> None:
    """A released mean or magnitude table as (set, sum) rows: a mean times its count is a sum."""
    result = evaluated.result
    if evaluated.kind == "mean" and result["n"]:
        rows.append(evaluated.query_sets[0])
        sums.append(Fraction(result["mean"]) * result["n"])
    if evaluated.kind == "magnitude":
        counts = evaluated.counts.to_numpy().ravel()
        for mask, cell, count in zip(evaluated.query_sets, result["cells"].values(), counts, strict=True):
            if cell is not None:
                rows.append(mask)
                sums.append(Fraction(cell) * (int(count) if result["statistic"] == "mean" else 1))


def exact_rank(matrix: list[list[int]]) -> int:
    """Rank over the rationals, by Bareiss's fraction-free elimination on integers."""
    m = [row[:] for row in matrix]
    rank, pivot_value = 0, 1
    columns = len(m[0]) if m else 0
    for column in range(columns):
        pivot = next((r for r in range(rank, len(m)) if m[r][column]), None)
        if pivot is None:
            continue
        m[rank], m[pivot] = m[pivot], m[rank]
        for r in range(rank + 1, len(m)):
            m[r] = [
                (m[rank][column] * m[r][k] - m[r][column] * m[rank][k]) // pivot_value for k in range(columns)
            ]
        pivot_value = m[rank][column]
        rank += 1
    return rank


def determined_records(sets: list[np.ndarray], n: int) -> list[int]:
    """Records whose value the released sums determine: e_j in the rational row space."""
    if not sets:
        return []
    matrix = [[int(x) for x in mask] for mask in sets]
    base = exact_rank(matrix)
    return [j for j in range(n) if exact_rank([*matrix, [int(i == j) for i in range(n)]]) == base]


def test_exact_rank_finds_a_tracker_by_hand():
    """The attacker's algebra on the four-set tracker: A, B, neither, all expose A and B's record."""
    n = 8
    in_a = np.array([1, 1, 1, 0, 0, 0, 0, 0], dtype=bool)
    in_b = np.array([0, 0, 1, 1, 1, 0, 0, 0], dtype=bool)
    sets = [in_a, in_b, ~in_a & ~in_b, np.ones(n, dtype=bool)]
    assert determined_records(sets, n) == [2]
    assert determined_records(sets[:3], n) == []


def _found_by_hypothesis() -> tuple[pd.DataFrame, list[dict]]:
    """A sequence hypothesis found with the audit switched off (2,000 examples, about two minutes,
    too slow to search again in every run): the mean over all 33 records, then a magnitude table by
    ``a`` over ``c = 0``. Every set is large and pairwise far apart, yet all - (a=0, c=0) - (a=1, c=0)
    is record 29, the one record with c = 1."""
    n = 33
    data = pd.DataFrame(
        {
            "a": [0] * 30 + [1] * 3,
            "b": [0] * n,
            "c": [0] * 29 + [1] + [0] * 3,
            "v": [1] * 29 + [7] + [1] * 3,
        }
    )
    specs = [
        {"type": "mean", "column": "v"},
        {"type": "magnitude", "rows": "a", "value": "v", "where": {"a": {"in": [0, 1]}, "c": {"in": [0]}}},
    ]
    return data, specs


@settings(max_examples=120)
@given(data_sets(), st.lists(analyses(), min_size=1, max_size=8))
@example(*_found_by_hypothesis())
def test_no_record_can_be_solved_from_what_is_released(data, specs):
    sets, sums = released_equations(data, specs)
    exposed = determined_records(sets, len(data))
    assert not exposed, f"records {exposed} are determined by {len(sets)} released sums"
    if sets:  # the equations are the data's: the attacker's system is consistent
        values = data["v"].to_numpy()
        assert all(abs(int(m.astype(int) @ values) - s) < 1e-6 for m, s in zip(sets, sums, strict=True))


def test_the_attack_finds_leaks_without_the_audit(monkeypatch):
    """Pairwise query-set control alone releases the sequence above, and the attacker's algebra then
    solves record 29's value; with the audit nothing is determined. (Its cells' values are all 1, a
    shared value that the shared-values rule refuses by itself, so that rule is switched off too,
    to show the audit alone stops the attack.)"""
    data, specs = _found_by_hypothesis()
    without_shared_values = dataclasses.replace(RULES, shared_values_disclosive=False)
    assert not determined_records(released_equations(data, specs)[0], len(data))
    assert not determined_records(released_equations(data, specs, without_shared_values)[0], len(data))
    monkeypatch.setattr(ReleaseAudit, "check", lambda self, functionals: None)
    sets, sums = released_equations(data, specs, without_shared_values)
    assert determined_records(sets, len(data)) == [29]
    assert round(sums[0] - sums[1] - sums[2], 9) == 7  # the victim's value, read off the released figures


# ---------------------------------------------------------------- a coalition, groups

LEVELS = {"a": 3, "b": 2, "c": 4, "g": 8, "x": 2}
COALITION_RULES = Rules()  # the defaults: t = 10, so groups of 1 to 9 records are protected


@st.composite
def coalition_data(draw) -> pd.DataFrame:
    """40 to 60 records from a drawn seed (hypothesis shrinks the seed and the size, not each cell)."""
    n, seed = draw(st.integers(40, 60)), draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    columns = {name: rng.integers(0, levels, size=n) for name, levels in LEVELS.items()}
    columns["v"] = rng.integers(1, 61, size=n)
    return pd.DataFrame(columns)


@st.composite
def coalition_analyses(draw) -> list[dict]:
    """One analysis, or an ill-conditioned family of means: unions of g levels {i} and {i + k} for k
    in a drawn set of offsets (a unit triangular pattern over the levels, whose inverse grows like
    the offsets' recurrence), possibly under a where on another column."""
    where = {}
    for name in draw(st.sets(st.sampled_from(["a", "b", "c", "x"]), max_size=2)):
        levels = draw(st.sets(st.integers(0, LEVELS[name] - 1), min_size=1))
        where[name] = {"in": sorted(levels)}
    kind = draw(
        st.sampled_from(["count", "mean", "frequency", "magnitude", "regression", "family", "tracker"])
    )
    if kind == "tracker":  # A, B and neither: with N public, the count and sum of A and B
        first, second = draw(st.sampled_from([("a", "c"), ("c", "a"), ("a", "g"), ("c", "g"), ("b", "g")]))
        in_first = sorted(
            draw(st.sets(st.integers(0, LEVELS[first] - 1), min_size=1, max_size=LEVELS[first] - 1))
        )
        in_second = sorted(
            draw(st.sets(st.integers(0, LEVELS[second] - 1), min_size=1, max_size=LEVELS[second] - 1))
        )
        out_first = sorted(set(range(LEVELS[first])) - set(in_first))
        out_second = sorted(set(range(LEVELS[second])) - set(in_second))
        return [
            {"type": "mean", "column": "v", "where": {first: {"in": in_first}}},
            {"type": "mean", "column": "v", "where": {second: {"in": in_second}}},
            {"type": "mean", "column": "v", "where": {first: {"in": out_first}, second: {"in": out_second}}},
        ]
    if kind == "family":
        offsets = draw(st.sets(st.integers(1, 3), min_size=1))
        length = draw(st.integers(3, LEVELS["g"]))
        chain = []
        for i in range(length):
            group = sorted({i} | {i + k for k in offsets if i + k < length})
            chain.append({"type": "mean", "column": "v", "where": {**where, "g": {"in": group}}})
        return chain
    spec: dict = {"type": kind}
    if kind == "mean":
        spec["column"] = "v"
    if kind == "regression":
        spec.update({"outcome": "v", "predictors": [draw(st.sampled_from(["x", "b"]))]})
    if kind in ("frequency", "magnitude"):
        spec["rows"] = draw(st.sampled_from(["a", "b", "c", "x"]))
    if kind == "magnitude":
        spec["value"] = "v"
        spec["statistic"] = draw(st.sampled_from(["sum", "mean"]))
    if where:
        spec["where"] = where
    return [spec]


@st.composite
def coalitions(draw) -> tuple[pd.DataFrame, list[tuple[str, dict]]]:
    data = draw(coalition_data())
    chains = draw(st.lists(coalition_analyses(), min_size=1, max_size=5))
    specs = [spec for chain in chains for spec in chain]
    identities = draw(st.lists(st.sampled_from("AB"), min_size=len(specs), max_size=len(specs)))
    return data, list(zip(identities, specs, strict=True))


def coalition_releases(
    data: pd.DataFrame, steps: list[tuple[str, dict]], per_identity: bool = False
) -> tuple[list[np.ndarray], list[Fraction]]:
    """Each identity's analyses through the controller's decision (one history for everyone, or,
    ``per_identity``, one each: keys as persons, without the coalition rule); the coalition pools
    what was released as (set, sum) equations. A regression on a binary predictor x releases the
    two subgroup means intercept + slope * level; the attacker is granted the subgroups' sizes
    (from a table, or background knowledge)."""
    histories: dict[str, ReleaseHistory] = {}
    rows, sums = [], []
    for who, spec in steps:
        history = histories.setdefault(
            who if per_identity else "everyone", ReleaseHistory(data, COALITION_RULES)
        )
        evaluated = released(spec, data, history)
        if evaluated is None:
            continue
        add_released_sums(evaluated, rows, sums)
        result = evaluated.result
        if evaluated.kind == "regression":
            (predictor,) = spec["predictors"]
            coefficients = result["coefficients"]
            selected = evaluated.query_sets[0]
            for level in sorted(set(data.loc[selected, predictor])):
                subgroup = selected & (data[predictor] == level).to_numpy()
                fitted = Fraction(coefficients["intercept"]) + Fraction(coefficients[predictor]) * int(level)
                rows.append(subgroup)
                sums.append(fitted * int(subgroup.sum()))
        if evaluated.kind in ("count", "frequency"):
            rows += list(evaluated.query_sets)  # counts: the sets themselves (their sums are sizes)
            sums += [Fraction(int(m.sum())) for m in evaluated.query_sets]
    return rows, sums


def determined_groups(sets: list[np.ndarray], n: int, t: int) -> list[tuple[int, ...]]:
    """Groups of 1 to t - 1 records whose indicator lies in the rational row space of the released
    sets and the universe (N is public): every atom, and every union of two or three atoms. Exact:
    fraction-free elimination over the integers, then each small atom's indicator reduced by the
    same integer row operations (a linear map whose kernel is the row space), so a union is
    determined exactly when its atoms' residues sum to zero."""
    matrix = np.array([np.ones(n, dtype=bool), *sets], dtype=np.int64)
    columns, atom_of = np.unique(matrix.T, axis=0, return_inverse=True)
    sizes = np.bincount(atom_of.ravel())
    basis: list[tuple[int, list[int]]] = []  # (pivot column, integer row)
    for row in columns.T.tolist():
        row = _reduce(row, basis, linear=False)
        pivot = next((c for c, v in enumerate(row) if v), None)
        if pivot is not None:
            basis.append((pivot, row))
    small = [a for a in range(len(columns)) if sizes[a] < t]
    residues = {a: tuple(_reduce([int(c == a) for c in range(len(columns))], basis)) for a in small}
    zero = tuple([0] * len(columns))
    found = []
    for size in (1, 2, 3):
        for group in combinations(small, size):
            if sum(sizes[a] for a in group) < t and _sum(residues[a] for a in group) == zero:
                found.append(tuple(int(j) for j in np.flatnonzero(np.isin(atom_of.ravel(), group))))
    return found


def _reduce(vector: list[int], basis: list[tuple[int, list[int]]], linear: bool = True) -> list[int]:
    """Eliminate the basis's pivots from ``vector``: v <- pivot * v - v[p] * row for each basis row
    in order. ``linear``: every step scales, so the map is the same linear map for every vector
    (residues of a sum are sums of residues); otherwise zero steps are skipped and the result is
    divided by its gcd (for building the basis)."""
    for pivot, row in basis:
        factor = vector[pivot]
        if factor or linear:
            scale = row[pivot]
            vector = [scale * v - factor * r for v, r in zip(vector, row, strict=True)]
    if not linear:
        divisor = gcd(*vector)
        if divisor > 1:
            vector = [v // divisor for v in vector]
    return vector


def _sum(vectors) -> tuple[int, ...]:
    vectors = list(vectors)
    return tuple(sum(values) for values in zip(*vectors, strict=True))


def _coalition_example(kind: str) -> tuple[pd.DataFrame, list[tuple[str, dict]]]:
    """Explicit sequences, one per protection against a coalition (each leaks with it switched off)."""
    rng = np.random.default_rng(7)
    n = 60
    data = pd.DataFrame({name: rng.integers(0, levels, size=n) for name, levels in LEVELS.items()})
    data["v"] = rng.integers(1, 61, size=n)
    if kind == "collusion":  # A: mean over c in {0, 1}; B: the same without the one record with a = 2
        data.loc[data.c.isin([0, 1]), "a"] = 0
        data.loc[data.index[data.c.isin([0, 1])][0], "a"] = 2
        return data, [
            ("A", {"type": "mean", "column": "v", "where": {"c": {"in": [0, 1]}}}),
            ("B", {"type": "mean", "column": "v", "where": {"c": {"in": [0, 1]}, "a": {"in": [0, 1]}}}),
        ]
    if kind == "group":  # A, B, neither: the count and sum of the two records in A and B
        data["a"] = np.where(np.arange(n) < 25, 0, 1)
        data["b"] = np.where((np.arange(n) >= 23) & (np.arange(n) < 45), 0, 1)
        return data, [
            ("A", {"type": "mean", "column": "v", "where": {"a": {"in": [0]}}}),
            ("B", {"type": "mean", "column": "v", "where": {"b": {"in": [0]}}}),
            ("A", {"type": "mean", "column": "v", "where": {"a": {"in": [1]}, "b": {"in": [1]}}}),
        ]
    if kind == "regression":  # S = c in {0, 1}: c = 0 (30 records) and one record with c = 1, x = 1
        data["c"] = np.where(np.arange(n) < 30, 0, 2 + np.arange(n) % 2)
        data.loc[30, ["c", "x"]] = [1, 1]
        data.loc[data.c == 0, "x"] = np.arange(30) % 2
        return data, [
            ("A", {"type": "mean", "column": "v", "where": {"c": {"in": [0]}, "x": {"in": [1]}}}),
            (
                "B",
                {"type": "regression", "outcome": "v", "predictors": ["x"], "where": {"c": {"in": [0, 1]}}},
            ),
        ]
    raise ValueError(kind)


@settings(max_examples=60)
@given(coalitions())
@example(_coalition_example("collusion"))
@example(_coalition_example("group"))
@example(_coalition_example("regression"))
def test_no_small_group_can_be_solved_by_a_coalition(case):
    data, steps = case
    sets, sums = coalition_releases(data, steps)
    exposed = determined_groups(sets, len(data), COALITION_RULES.threshold)
    assert not exposed, f"groups {exposed} are determined by {len(sets)} released sums"
    values = data["v"].to_numpy()
    for mask, value in zip(sets, sums, strict=True):  # the attacker's equations are the data's
        assert (
            abs(Fraction(int(mask.astype(int) @ values)) - value) < Fraction(1, 10**6) or value == mask.sum()
        )


@pytest.mark.parametrize("kind", ["collusion", "group", "regression"])
def test_each_protection_is_needed(kind, monkeypatch):
    """Switched off, each protection lets its example through and a group of 1 to 9 records is
    solved: one history per identity (collusion); an audit of single records only (group); a
    regression audited as its query set alone (regression)."""
    from petlab.server.controller import release_audit, release_history

    data, steps = _coalition_example(kind)
    assert not determined_groups(coalition_releases(data, steps)[0], len(data), 10)
    if kind == "group":
        single = release_audit.find_group
        monkeypatch.setattr(
            release_audit, "find_group", lambda r, s, t, p, *limits: single(r, s, 2, p, *limits)
        )
    if kind == "regression":
        every = release_history.released_functionals
        monkeypatch.setattr(
            release_history,
            "released_functionals",
            lambda e: every(e)[:1] if e.kind == "regression" else every(e),
        )
    sets, _ = coalition_releases(data, steps, per_identity=kind == "collusion")
    exposed = determined_groups(sets, len(data), 10)
    assert exposed and all(1 <= len(group) <= 9 for group in exposed)
    if kind == "group":
        assert any(len(group) == 2 for group in exposed)
