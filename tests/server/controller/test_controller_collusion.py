"""Attacks by colluding keys and persons, through the gRPC API and the command line, on the shipped
5,000-record ACS sample. Each recovers a real record's value (or a small group's count and sum)
from a controller without one of its protections. Each test runs the attack against the
controller as it is (refused) and again with the one protection it targets switched off
(monkeypatched), where the attacker's arithmetic, in exact rationals, recovers the confidential
figure: so every test fails if its protection is removed.
"""

from __future__ import annotations

import itertools
import json
import logging
from fractions import Fraction

import grpc
import numpy as np
import pandas as pd
import pytest
from controller_calls import open_session, outcomes, reveal, status_of
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from petlab.client.analyst import describe, prepare
from petlab.client.knn_client import make_channel
from petlab.crypto.chain.certification import certify
from petlab.crypto.chain.traces import public_key_bytes, public_key_pem
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2_grpc
from petlab.server.controller import release_audit, release_history, service
from petlab.server.controller.analyses import evaluate
from petlab.server.controller.output_checking import ACRO_PARITY, check
from petlab.server.controller.people import key_person
from petlab.server.controller.release_audit import Finding, ReleaseAudit
from petlab.server.controller.release_history import ReleaseHistory
from petlab.server.main import main as server_main

DATA = pd.read_csv(acs_sample_path())
N = len(DATA)


@pytest.fixture()
def server(serve, tmp_path):
    with serve(
        tmp_path,
        analysis_data=acs_sample_path(),
        open_analysis=True,
        analysis_cooldown_seconds=0,
        analysis_refusal_budget=1000,
    ) as running:
        yield running


def total(result: dict) -> Fraction:
    """A released mean times its n: the sum, exactly (the data's values are integers)."""
    return Fraction(round(result["mean"] * result["n"]))


def mean(where: dict) -> dict:
    return {"type": "mean", "column": "hpw", "where": where}


# ---------------------------------------------------------------- 1. two persons, one record


def test_two_persons_cannot_difference_out_one_record(server, channel, monkeypatch, caplog):
    """Person A releases count and mean of hpw over S (hundreds of records), person B the same over
    S minus the one record of S with a rare occupation: n_A mean_A - n_B mean_B is that person's
    hours. The history is global, so B is refused; with one history per person B is answered."""
    in_s = DATA.age.between(30, 39)
    rare = DATA[in_s].occ.value_counts()
    occupation = int(rare[rare == 1].index[0])
    target = DATA.index[in_s & (DATA.occ == occupation)][0]
    whole = mean({"age": {"between": [30, 39]}})
    without = mean({"age": {"between": [30, 39]}, "occ": {"ne": occupation}})
    assert outcomes(channel, [whole])[0]["n"] == int(in_s.sum()) > 100
    with caplog.at_level(logging.INFO, logger="petlab.server.controller.service"):
        assert outcomes(channel, [without]) == [None]  # another person: refused all the same
    assert "query-set-size control" in server.controller.diagnostics.path.read_text()
    assert "query-set-size control" not in caplog.text  # figures go to the confidential file only

    per_person: dict[str, ReleaseHistory] = {}
    servicer = server.controller
    monkeypatch.setattr(
        servicer, "_history_for", lambda person: per_person.setdefault(person, ReleaseHistory(DATA))
    )
    a, b = outcomes(channel, [whole])[0], outcomes(channel, [without])[0]
    assert total(a) - total(b) == DATA.hpw[target]


# ---------------------------------------------------------------- 2. a regression and a mean


def _one_man_value() -> tuple[str, int, int, int]:
    """A column, a value held by exactly one man (the target), and a value with many men and women."""
    for column in ("occ", "edu", "rel", "waob", "wc", "ms", "race"):
        men = DATA[DATA.sex == 1][column].value_counts()
        women = DATA[DATA.sex == 2][column].value_counts()
        ones = [v for v in men.index if men[v] == 1]
        wide = [v for v in men.index if men[v] >= 12 and women.get(v, 0) >= 12]
        if ones and wide:
            single, common = int(ones[0]), int(wide[0])
            target = DATA.index[(DATA[column] == single) & (DATA.sex == 1)][0]
            return column, single, common, int(target)
    raise AssertionError("no value held by exactly one man")


def test_regression_coefficients_are_means(server, channel, monkeypatch):
    """OLS of hpw on sex over S = {v0, v1} gives intercept + slope = the men's mean; S's men are
    those of v0 plus the one man of v1; a mean over v0's men then isolates him (two analyses). The
    regression is audited as what it reveals (each level's subgroup), so it is refused; audited as
    its query set S alone, it is answered."""
    column, single, common, target = _one_man_value()
    men_of_common = mean({column: {"eq": common}, "sex": {"eq": 1}})
    regression = {
        "type": "regression",
        "outcome": "hpw",
        "predictors": ["sex"],
        "where": {column: {"in": sorted([single, common])}},
    }
    assert outcomes(channel, [men_of_common, regression])[1] is None

    every_functional = release_history.released_functionals

    def query_set_only(evaluated):
        rows = every_functional(evaluated)
        return rows[:1] if evaluated.kind == "regression" else rows

    monkeypatch.setattr(release_history, "released_functionals", query_set_only)
    part, fit = outcomes(channel, [men_of_common, regression])
    coefficients = fit["coefficients"]
    men_mean = Fraction(coefficients["intercept"]) + Fraction(coefficients["sex"])  # sex = 1
    recovered = men_mean * (part["n"] + 1) - total(part)
    assert abs(recovered - int(DATA.hpw[target])) < Fraction(1, 10**6)


# ---------------------------------------------------------------- 3. floating point


def float_svd_audit(masks: np.ndarray) -> int:
    """An audit in floating point (``QuerySetControl.isolated_record``): records whose indicator's
    squared norm in an SVD basis of the released sets, truncated at a relative cut-off, is 1."""
    rows = masks.astype(np.float64)
    _, singular, vt = np.linalg.svd(rows, full_matrices=False)
    basis = vt[singular > singular.max() * max(rows.shape) * np.finfo(float).eps]
    return int(((basis**2).sum(axis=0) > 1 - 1e-6).sum())


def _ill_conditioned_family() -> tuple[list[dict], int]:
    """57 means over unions of three age levels in a triangular pattern (levels i, i+1, i+3, i+5):
    the matrix over the levels is unit upper triangular, so every level is determined, with
    coefficients growing like 1.57^i (the root of 1 + w + w^3 + w^5 nearest 0 has modulus 0.637).
    A 58th mean over the target's level without the target and the last level then determines the
    target's hours, through coefficients near 10^11: the float SVD drops that direction."""
    counts = DATA.age.value_counts()
    levels = sorted(int(a) for a in counts.index if counts[a] >= 10)
    for column in ("edu", "occ", "rel", "waob"):
        held = DATA[column].value_counts()
        for value in sorted(v for v in held.index if held[v] == 1):
            target = int(DATA.index[DATA[column] == value][0])
            if int(DATA.age[target]) in levels:
                break
        else:
            continue
        break
    first = int(DATA.age[target])
    order = [first, *[a for a in levels if a != first][:56]]
    specs = [
        mean({"age": {"in": sorted({order[i]} | {order[i + k] for k in (1, 3, 5) if i + k < len(order)})}})
        for i in range(len(order))
    ]
    specs.append(mean({"age": {"in": sorted([first, order[-1]])}, column: {"ne": int(value)}}))
    return specs, target


def solve_exactly(rows: list[list[int]], target: list[int]) -> list[Fraction] | None:
    """x with x^T rows = target in exact rationals (Gaussian elimination on the transpose)."""
    m = len(rows)
    augmented = [[Fraction(rows[i][j]) for i in range(m)] + [Fraction(target[j])] for j in range(len(target))]
    pivots, r = [], 0
    for c in range(m):
        pivot = next((i for i in range(r, len(augmented)) if augmented[i][c]), None)
        if pivot is None:
            continue
        augmented[r], augmented[pivot] = augmented[pivot], augmented[r]
        augmented[r] = [v / augmented[r][c] for v in augmented[r]]
        for i in range(len(augmented)):
            if i != r and augmented[i][c]:
                factor = augmented[i][c]
                augmented[i] = [a - factor * b for a, b in zip(augmented[i], augmented[r], strict=True)]
        pivots.append(c)
        r += 1
    if any(row[-1] for row in augmented[r:]):
        return None
    x = [Fraction(0)] * m
    for i, c in enumerate(pivots):
        x[c] = augmented[i][-1]
    return x


def test_an_ill_conditioned_family_does_not_defeat_the_audit(server, channel, monkeypatch):
    """About 60 means whose matrix has condition number near 10^12: the float SVD audit finds no
    exposed record, the exact audit (modulo primes) refuses the last mean; with the float audit in
    its place the family is answered and the target's hours follow in exact rationals."""
    specs, target = _ill_conditioned_family()
    masks = np.array([evaluate(spec, DATA).query_sets[0] for spec in specs])
    assert len(specs) == 58 and float_svd_audit(masks) == 0
    assert np.linalg.cond(masks.astype(float)) > 1e11
    results = outcomes(channel, specs)
    assert len(results) == 58 and None not in results[:57] and results[57] is None

    def old_audit(self, functionals):
        members = np.concatenate([self.released_bits(), np.stack([f.members for f in functionals])])
        rows = np.unpackbits(members, axis=1, count=self.n_records)
        return Finding("a record is exposed", 1) if float_svd_audit(rows) else None

    monkeypatch.setattr(ReleaseAudit, "check", old_audit)
    monkeypatch.setattr(server.controller.history, "regions", False)  # the region audit refuses it too
    results[57] = outcomes(channel, specs[57:])[0]  # the first 57 are released (to anyone) already
    assert results[57] is not None
    columns, atom_of = np.unique(masks.T.astype(int), axis=0, return_inverse=True)  # the atoms
    assert (atom_of == atom_of[target]).sum() == 1  # the target is an atom of its own
    x = solve_exactly(columns.T.tolist(), [int(a == atom_of[target]) for a in range(len(columns))])
    assert x is not None
    recovered = sum((c * total(r) for c, r in zip(x, results, strict=True)), Fraction(0))
    assert recovered == DATA.hpw[target]


# ---------------------------------------------------------------- 4. groups, not only records


def _pair() -> tuple[str, int, str, int]:
    """A and B, each large, whose intersection is a group of two records."""
    for first in ("incc", "race"):
        for a in sorted(DATA[first].unique()):
            for second in ("edu", "rel", "occ", "waob"):
                for b in sorted(DATA[second].unique()):
                    in_a, in_b = DATA[first] == a, DATA[second] == b
                    if (in_a & in_b).sum() == 2 and min(in_a.sum(), in_b.sum(), (~in_a & ~in_b).sum()) >= 12:
                        return first, int(a), second, int(b)
    raise AssertionError("no pair found")


def test_a_group_of_two_is_protected(server, channel, monkeypatch):
    """A, B, neither and all, each large and pairwise far apart: by inclusion-exclusion they give the
    count and the sum of the two records in A and B. The audit protects groups of 1 to t - 1
    records, so the third mean is refused (N is public); an audit of single records only answers
    all four, and the pair's count and sum follow."""
    first, a, second, b = _pair()
    specs = [
        mean({first: {"eq": a}}),
        mean({second: {"eq": b}}),
        mean({first: {"ne": a}, second: {"ne": b}}),
        {"type": "mean", "column": "hpw"},
    ]
    assert outcomes(channel, specs)[2] is None
    single_records = release_audit.find_group
    monkeypatch.setattr(
        release_audit,
        "find_group",
        lambda rows, sizes, t, p, *limits: single_records(rows, sizes, 2, p, *limits),
    )
    monkeypatch.setattr(server.controller.history, "regions", False)  # the pair shares its hours
    results = outcomes(channel, specs)
    assert None not in results
    pair = (DATA[first] == a) & (DATA[second] == b)
    count = sum(r["n"] for r in results[:3]) - N
    assert count == 2 == int(pair.sum())
    assert (
        total(results[0]) + total(results[1]) + total(results[2]) - total(results[3]) == DATA.hpw[pair].sum()
    )


# ---------------------------------------------------------------- 5. zero cells


def test_equal_counts_do_not_show_a_shared_value(server, channel, monkeypatch):
    """count(occ = c) equal to count(occ = c and sex = s) says that everyone in occupation c has sex s:
    a zero cell (occupation c and the other sex), refused; without the rule both are answered."""
    groups = DATA.groupby("occ").sex.agg(["count", "nunique", "first"])
    occupation = int(groups[(groups["count"] >= 10) & (groups["nunique"] == 1)].index[0])
    sex = int(groups.loc[occupation, "first"])
    specs = [
        {"type": "count", "where": {"occ": {"eq": occupation}}},
        {"type": "count", "where": {"occ": {"eq": occupation}, "sex": {"eq": sex}}},
    ]
    first, second = outcomes(channel, specs)
    assert first is not None and second is None
    monkeypatch.setattr(ReleaseHistory, "_empty_cell", lambda self, rows: None)
    monkeypatch.setattr(server.controller.history, "regions", False)  # the region audit refuses it too
    first, second = outcomes(channel, specs)
    assert first["count"] == second["count"]  # the whole occupation shares one sex


def test_a_mean_equal_to_an_extreme_is_a_zero_cell():
    """A mean over records that all hold the same value (a mean equal to the set's minimum and
    maximum) shows the group sharing it, unless the definition admits that value only."""
    counts = DATA.groupby(["occ", "hpw"]).size()
    occupation, hours = next(k for k, v in counts.items() if v >= 10)
    elsewhere = next(h for h in sorted(DATA.hpw.unique()) if h not in set(DATA.hpw[DATA.occ == occupation]))
    both = {"occ": {"eq": int(occupation)}, "hpw": {"in": sorted([int(hours), int(elsewhere)])}}
    shared = evaluate(mean(both), DATA)
    assert shared.result["mean"] == hours and shared.shared_value is not None
    assert not check(shared).release
    fixed = evaluate(mean({"occ": {"eq": int(occupation)}, "hpw": {"eq": int(hours)}}), DATA)
    assert fixed.shared_value is None and check(fixed).release
    assert check(shared, ACRO_PARITY).release  # acro's rules alone release it


# ---------------------------------------------------------------- 6. refusals are bits


def _probe(target: int, threshold: int) -> dict:
    """A count that is refused exactly when the target's hours are below ``threshold``: 9 other
    records of a box around the target (its values of a few columns, age and education windows)
    have hours >= ``threshold`` (the attacker knows everyone but the target), so the count is 9
    (refused) or 10 (answered)."""
    row = DATA.loc[target]
    others = DATA.drop(index=target)
    age, edu = int(row.age), int(row.edu)
    top_age, top_edu = int(DATA.age.max()), int(DATA.edu.max())
    lows, highs = np.meshgrid(np.arange(1, edu + 1), np.arange(edu, top_edu + 1), indexing="ij")
    for fixed in (
        ["sex"],
        ["sex", "race"],
        ["sex", "ms"],
        ["sex", "race", "ms"],
        ["sex", "race", "ms", "wc"],
    ):
        chosen = (others.hpw >= threshold) & (others[fixed] == row[fixed]).all(axis=1)
        grid = np.zeros((top_age + 2, top_edu + 2), dtype=np.int64)
        np.add.at(grid, (others.age[chosen].to_numpy(), others.edu[chosen].to_numpy()), 1)
        for width in range(0, top_age):
            for low in range(max(age - width, 0), age + 1):
                by_edu = np.concatenate([[0], np.cumsum(grid[low : low + width + 1].sum(axis=0))])
                hits = np.argwhere(by_edu[highs + 1] - by_edu[lows] == 9)  # 9 with edu in [low, high]
                if len(hits):
                    where = {column: {"eq": int(row[column])} for column in fixed}
                    where["age"] = {"between": [low, low + width]}
                    where["edu"] = {"between": [int(lows[tuple(hits[0])]), int(highs[tuple(hits[0])])]}
                    where["hpw"] = {"between": [threshold, 99]}
                    return {"type": "count", "where": where}
    raise AssertionError(f"no probe for {threshold}")


def _search(channel, target: int, key_for) -> tuple[int, int, list]:
    """Binary search of the target's hours in [1, 99], one fresh key per probe; returns the final
    interval and the status codes of probes the controller would not even open."""
    low, high, stopped = 1, 99, []
    while low < high:
        threshold = (low + high + 1) // 2
        try:
            answered = outcomes(channel, [], key_for([_probe(target, threshold)]))[0] is not None
        except grpc.RpcError as exc:
            stopped.append(exc.code())
            break
        low, high = (threshold, high) if answered else (low, threshold - 1)
    return low, high, stopped


@pytest.mark.parametrize("cooldown", [0, 3600])
def test_refusal_probes_from_fresh_keys_of_one_person(serve, tmp_path, monkeypatch, cooldown):
    """Seven one-analysis probes, each from a fresh key certified for the same person, binary-search
    one person's hours. Refusals are counted per person: with a cool-down the second probe after a
    refusal is not even opened; without one, the third refusal suspends the person
    (PERMISSION_DENIED) until the data owner lifts it. Keys as persons, without the coalition rule:
    the search ends with the exact hours."""
    target = int(DATA.index[(DATA.hpw == 2) & DATA.age.between(30, 60)][0])
    authority = Ed25519PrivateKey.generate()
    public = tmp_path / "authority.pub.pem"
    public.write_bytes(public_key_pem(authority.public_key()))
    settings = {
        "analysis_data": acs_sample_path(),
        "authority_key": public,
        "controller_id": "acs",
        "analysis_cooldown_seconds": cooldown,
        "analysis_refusal_budget": 3,
    }
    with serve(tmp_path / "srv", **settings) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        controller = describe(channel)

        def mallory(specs):
            return certify(
                prepare(specs, Ed25519PrivateKey.generate()), {}, authority, controller, person="mallory"
            )

        low, high, stopped = _search(channel, target, mallory)
        assert low < high and DATA.hpw[target] in range(low, high + 1)  # an interval, not the value
        if cooldown:
            assert stopped == [grpc.StatusCode.FAILED_PRECONDITION]
        else:
            assert stopped == [grpc.StatusCode.PERMISSION_DENIED]
            data_dir = str(tmp_path / "srv")
            assert server_main(["persons", "list", "--data-dir", data_dir]) == 0
            assert server_main(["persons", "lift", "mallory", "--data-dir", data_dir]) == 0
            assert outcomes(channel, [], mallory([{"type": "count"}])) == [{"count": N}]
        monkeypatch.setattr(
            running.controller, "_person_of", lambda key, scope: key_person(key)
        )  # every key its own person
        low, high, stopped = _search(channel, target, mallory)
        assert stopped == [] and low == high == DATA.hpw[target]


# ---------------------------------------------------------------- 7. people at every Next


def test_one_open_session_per_person_checked_at_every_next(serve, tmp_path):
    """Two keys on the allow-list for one person: opening a session closes the open one; a refusal
    closes the person's sessions and starts the cool-down; a suspension by the data owner stops an
    open session at its next step; the daily quota is checked at every step too."""
    first, second, third = (Ed25519PrivateKey.generate() for _ in range(3))
    allow = tmp_path / "analysts.pem"
    allow.write_bytes(
        b"# person: ann\n"
        + public_key_pem(first.public_key())
        + b"# person: ann\n"
        + public_key_pem(second.public_key())
        + b"# person: bob\n"
        + public_key_pem(third.public_key())
    )
    count = {"type": "count", "where": {"sex": {"eq": 1}}}
    settings = {
        "analysis_data": acs_sample_path(),
        "analysts": allow,
        "analysis_cooldown_seconds": 3600,
        "analysis_quota_per_day": 3,
    }
    with serve(tmp_path / "srv", **settings) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        stub = controller_pb2_grpc.AnalysisControllerStub(channel)
        early = prepare([count, count], first)
        early_session = open_session(stub, early)
        assert reveal(stub, early_session, early, 1).WhichOneof("outcome") == "result_json"
        later = prepare([{"type": "count", "where": {"age": {"eq": 27}, "occ": {"eq": 1}}}], second)
        later_session = open_session(stub, later)  # the same person: the earlier one closes
        assert status_of(reveal, stub, early_session, early, 2) == grpc.StatusCode.FAILED_PRECONDITION
        assert reveal(stub, later_session, later, 1).abort_reason  # withheld: the cool-down starts
        assert status_of(open_session, stub, prepare([count], first)) == grpc.StatusCode.FAILED_PRECONDITION
        # bob: suspended by the data owner while his session is open
        bobs = prepare([count, count, count, count], third)
        session = open_session(stub, bobs)
        assert reveal(stub, session, bobs, 1).WhichOneof("outcome") == "result_json"
        data_dir = str(tmp_path / "srv")
        assert server_main(["persons", "suspend", "bob", "--data-dir", data_dir]) == 0
        assert status_of(reveal, stub, session, bobs, 2) == grpc.StatusCode.PERMISSION_DENIED
        assert status_of(reveal, stub, session, bobs, 2) == grpc.StatusCode.FAILED_PRECONDITION  # closed
        assert server_main(["persons", "lift", "bob", "--data-dir", data_dir]) == 0
        again = prepare([count, count, count], third)
        session = open_session(stub, again)
        for j in (1, 2):  # bob's second and third analyses today
            assert reveal(stub, session, again, j).WhichOneof("outcome") == "result_json"
        assert status_of(reveal, stub, session, again, 3) == grpc.StatusCode.RESOURCE_EXHAUSTED  # quota: 3
    assert public_key_bytes(first.public_key()) != public_key_bytes(second.public_key())


# ---------------------------------------------------------------- 8. history and versions


def test_the_history_survives_a_restart_and_is_tied_to_the_data(serve, tmp_path, caplog):
    """Releases made before a restart are audited after it (the differencing attack across a
    restart is refused); a changed data file starts a new, empty history and the log says so."""
    in_s = DATA.age.between(30, 39)
    occupation = int(DATA[in_s].occ.value_counts().pipe(lambda c: c[c == 1]).index[0])
    whole = mean({"age": {"between": [30, 39]}})
    without = mean({"age": {"between": [30, 39]}, "occ": {"ne": occupation}})
    settings = {"analysis_data": acs_sample_path(), "open_analysis": True, "analysis_cooldown_seconds": 0}
    with serve(tmp_path, **settings) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        assert outcomes(channel, [whole])[0] is not None
    with (
        caplog.at_level(logging.INFO, logger="petlab.server.controller.service"),
        serve(tmp_path, **settings) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        assert "2 functionals released before" in caplog.text  # the count and the sum
        assert outcomes(channel, [without]) == [None]
    changed = tmp_path / "changed.csv"
    DATA.assign(hpw=DATA.hpw.where(DATA.index != 0, DATA.hpw[0] + 1)).to_csv(changed, index=False)
    caplog.clear()
    with (
        caplog.at_level(logging.INFO, logger="petlab.server.controller.service"),
        serve(tmp_path, **{**settings, "analysis_data": changed}) as running,
    ):
        assert "a new, empty release history starts" in caplog.text
        assert "another data file" in caplog.text
        assert running.controller.history.n_released == 0


def test_the_example_sequences_still_release(channel):
    """client/examples/analyses.json, the docs' benign sequence: every analysis is answered."""
    from importlib import resources

    specs = json.loads(resources.files("petlab.client.examples").joinpath("analyses.json").read_text())
    results = outcomes(channel, specs["analyses"])
    assert len(results) == len(specs["analyses"]) and None not in results


# ---------------------------------------------------------------- 9. sums that are counts
#
# A sum of a column over S is not only "S's sum": where the column takes few values, it is a count
# of a finer set the audit never saw (the mean of sex over S is 1 + the share of women in S), and a
# set defined by the column's value pins the column on it. Each attack below is answered, in one or
# two analyses, by an audit that holds only the query set 1_S; it is refused because a sum of y over
# S is audited as the weighted functional y . 1_S as well.


_every_functional = release_history.released_functionals


def without_sums_as_counts(server, monkeypatch) -> None:
    """Switch the protection off: a fresh, empty history, and the functionals released without the
    sums-as-counts rule (query sets, each quantile's query set without its sides, and regressions'
    numeric predictors, never a sum's value weights)."""

    def functionals(evaluated):
        rows = _every_functional(evaluated)
        if evaluated.kind == "quantiles":
            return rows[:1]
        if evaluated.kind == "regression":
            predictors = set(evaluated.result["coefficients"]) - {"intercept"}
            return [row for row in rows if row.weight is None or row.weight in predictors]
        return [row for row in rows if row.weight is None]

    fresh = ReleaseHistory(DATA)
    monkeypatch.setattr(server.controller, "_history_for", lambda person: fresh)
    monkeypatch.setattr(release_history, "released_functionals", functionals)
    monkeypatch.setattr(service, "released_functionals", functionals)  # what the service records


def _occupation_with_few_women() -> tuple[int, int]:
    women = DATA.groupby("occ").sex.agg(["size", lambda s: int((s == 2).sum())])
    women.columns = ["n", "women"]
    few = women[(women.n >= 20) & (women.women > 0) & (women.women < 10)]
    return int(few.index[0]), int(few.women.iloc[0])


def test_a_mean_of_a_two_valued_column_is_a_count(server, channel, monkeypatch):
    """The mean of sex (1 or 2) over an occupation is 1 + women / n: one analysis gives the number of
    women in it, a cell of fewer than t records. Refused; audited as the query set alone, answered."""
    occupation, women = _occupation_with_few_women()
    spec = {"type": "mean", "column": "sex", "where": {"occ": {"eq": occupation}}}
    assert outcomes(channel, [spec]) == [None]
    without_sums_as_counts(server, monkeypatch)
    (result,) = outcomes(channel, [spec])
    assert total(result) - result["n"] == women < 10


def test_a_mean_over_two_values_counts_the_rarer(server, channel, monkeypatch):
    """The mean of hours over `hpw between [h, h + 1]` is h + (records at h + 1) / n: the count of a
    group of fewer than t records who work h + 1 hours."""
    held = DATA.hpw.value_counts()
    hours = next(h for h in sorted(held.index) if held[h] >= 20 and 0 < held.get(h + 1, 0) < 10)
    spec = mean({"hpw": {"between": [int(hours), int(hours) + 1]}})
    assert outcomes(channel, [spec]) == [None]
    without_sums_as_counts(server, monkeypatch)
    (result,) = outcomes(channel, [spec])
    assert total(result) - hours * result["n"] == held[hours + 1] < 10


def test_a_cell_mean_of_a_two_valued_column_is_a_count(server, channel, monkeypatch):
    """A frequency table gives each income class's count in an occupation; a magnitude table of the
    mean of sex per class then gives the women of each class: a cell of fewer than t records."""
    for occupation in sorted(DATA.occ.unique()):
        cells = DATA[DATA.occ == occupation].groupby("incc").sex.agg(["size", lambda s: int((s == 2).sum())])
        cells.columns = ["n", "women"]
        if len(cells) == 2 and (cells.n >= 10).all() and (cells.women > 0).all():
            small = cells[(cells.women < 10) & (cells.women < cells.n)]
            if len(small):
                break
    where = {"occ": {"eq": int(occupation)}}
    counts = {"type": "frequency", "rows": "incc", "where": where}
    means = {"type": "magnitude", "rows": "incc", "value": "sex", "statistic": "mean", "where": where}
    first, second = outcomes(channel, [counts, means])
    assert first is not None and second is None
    without_sums_as_counts(server, monkeypatch)
    first, second = outcomes(channel, [counts, means])
    level = str(int(small.index[0]))
    n = first["cells"][level]
    assert round(second["cells"][level] * n) - n == int(small.women.iloc[0]) < 10


def test_a_regression_with_a_two_valued_outcome_counts_a_subgroup(server, channel, monkeypatch):
    """OLS of the income class (1 or 2) on sex over an occupation: intercept + slope x sex is the mean
    class of each sex, i.e. the count of high incomes among the men: fewer than t records."""
    cells = DATA.groupby(["occ", "sex"]).incc.agg(["size", lambda s: int((s == 2).sum())])
    cells.columns = ["n", "high"]
    chosen = cells[(cells.n >= 10) & (cells.high > 0) & (cells.high < 10)]
    occupation, sex = (int(v) for v in chosen.index[0])
    n, high = int(chosen.n.iloc[0]), int(chosen.high.iloc[0])
    spec = {
        "type": "regression",
        "outcome": "incc",
        "predictors": ["sex"],
        "where": {"occ": {"eq": occupation}},
    }
    assert outcomes(channel, [spec]) == [None]
    without_sums_as_counts(server, monkeypatch)
    (fit,) = outcomes(channel, [spec])
    coefficients = fit["coefficients"]
    class_mean = Fraction(coefficients["intercept"]) + sex * Fraction(coefficients["sex"])
    assert round(class_mean * n) - n == high < 10


def test_one_record_s_income_class_from_a_mean_and_a_count(server, channel, monkeypatch):
    """Person A: the mean income class over S (its count of high incomes, as above). Person B: the
    count of high incomes over S without the one record of a rare occupation. The two query sets
    are far apart (S's low incomes), so the pairwise rule and the set-only audit pass; the
    difference is that person's income class."""
    in_s = DATA.age.between(30, 39)
    occupation = int(DATA[in_s].occ.value_counts().pipe(lambda c: c[c == 1]).index[0])
    target = int(DATA.index[in_s & (DATA.occ == occupation)][0])
    whole = {"type": "mean", "column": "incc", "where": {"age": {"between": [30, 39]}}}
    high = int(DATA.incc[target])
    without = {
        "type": "count",
        "where": {"age": {"between": [30, 39]}, "occ": {"ne": occupation}, "incc": {"eq": high}},
    }
    assert outcomes(channel, [whole])[0] is not None
    assert outcomes(channel, [without]) == [None]
    without_sums_as_counts(server, monkeypatch)
    (a,), (b,) = outcomes(channel, [whole]), outcomes(channel, [without])
    with_high = total(a) - a["n"]  # records of S with class 2
    in_class = with_high if high == 2 else a["n"] - with_high
    assert in_class - b["count"] == 1  # the target is in the class the count left out


def _interpolated_quantile() -> tuple[str, int, int, float, int]:
    """A range of a column, a probability at which the quantile of incc falls strictly between 1
    and 2 (so the count of class 1 is floor((n - 1) p) + 1, exactly), and an occupation held by 1 to
    9 records of the range."""
    for column in ("edu", "age", "hpw"):
        low_end, high_end = int(DATA[column].min()), int(DATA[column].max())
        for low in range(low_end, high_end):
            for high in range(low + 3, high_end + 1):
                chosen = DATA[DATA[column].between(low, high)]
                n, ones = len(chosen), int((chosen.incc == 1).sum())
                for p in (0.1, 0.25, 0.5, 0.75, 0.9):
                    position = (n - 1) * p
                    if min(ones, n - ones) >= 10 and int(position) + 1 == ones and position != int(position):
                        held = chosen.occ.value_counts()
                        few = held[held < 10]
                        if len(few):
                            return column, low, high, p, int(few.index[0])
    raise AssertionError("no interpolated quantile")


def test_an_interpolated_quantile_is_a_count(server, channel, monkeypatch):
    """np.quantile interpolates: a quantile of incc strictly between 1 and 2 says exactly how many
    records of S have class 1. With the count of class 1 over S without one small occupation, the
    occupation's count of class 1 follows (fewer than t records). Each quantile's sides (the records
    below it and above it) are audited as query sets now, so the count is refused."""
    column, low, high, p, occupation = _interpolated_quantile()
    in_range = {column: {"between": [low, high]}}
    quantile = {"type": "quantiles", "column": "incc", "probabilities": [p], "where": in_range}
    rest = {"type": "count", "where": {**in_range, "occ": {"ne": occupation}, "incc": {"eq": 1}}}
    first, second = outcomes(channel, [quantile, rest])
    assert first is not None and 1 < first["quantiles"][0] < 2 and second is None
    without_sums_as_counts(server, monkeypatch)
    first, second = outcomes(channel, [quantile, rest])
    group = DATA[DATA[column].between(low, high) & (DATA.occ == occupation)]
    ones = int((first["n"] - 1) * p) + 1
    assert ones - second["count"] == int((group.incc == 1).sum())
    assert len(group) < 10


def _cross_cell() -> tuple[str, str, list[int], list[int], int, int]:
    """Two columns, three values of each, whose 3 x 3 cross table has one cell of 1 to 9 records and
    every other cell of at least 12 (the table itself is refused)."""
    for first, second in itertools.permutations(["race", "ms", "wc", "waob", "rel"], 2):
        held_1, held_2 = DATA[first].value_counts(), DATA[second].value_counts()
        common_1 = sorted(int(v) for v in held_1[held_1 >= 40].index)[:6]
        common_2 = sorted(int(v) for v in held_2[held_2 >= 40].index)[:6]
        for levels_1 in itertools.combinations(common_1, 3):
            for levels_2 in itertools.combinations(common_2, 3):
                chosen = DATA[DATA[first].isin(levels_1) & DATA[second].isin(levels_2)]
                table = pd.crosstab(chosen[first], chosen[second])
                table = table.reindex(index=list(levels_1), columns=list(levels_2), fill_value=0).to_numpy()
                small = (table > 0) & (table < 10)
                if small.sum() == 1 and (table[~small] >= 12).all():
                    i, j = (int(v) for v in np.argwhere(small)[0])
                    return first, second, list(levels_1), list(levels_2), i, j
    raise AssertionError("no cross cell")


def test_two_discrete_predictors_reveal_a_cross_cell(server, channel, monkeypatch):
    """OLS of hours on two three-valued predictors: X^T X holds the sum of x1 x2 over S, one
    combination of the nine cross cells. The margins (means over each level), three large cells
    (counts) and that combination determine every cell, among them one of fewer than t records,
    which no two released sets differ by. The regression is audited with the product x1 x2 as a
    weighted functional, so it is refused; without it, the cell follows in exact rationals."""
    first, second, levels_1, levels_2, i, j = _cross_cell()
    where = {first: {"in": levels_1}, second: {"in": levels_2}}
    specs = [mean(where)]
    specs += [mean({**where, first: {"eq": v}}) for v in levels_1]
    specs += [mean({**where, second: {"eq": v}}) for v in levels_2]
    cells = [(a, b) for a in range(3) for b in range(3) if a != i and b != j][:3]
    specs += [
        {"type": "count", "where": {**where, first: {"eq": levels_1[a]}, second: {"eq": levels_2[b]}}}
        for a, b in cells
    ]
    specs.append({"type": "regression", "outcome": "hpw", "predictors": [first, second], "where": where})
    results = outcomes(channel, specs)
    assert None not in results[:-1] and results[-1] is None
    without_sums_as_counts(server, monkeypatch)
    results = outcomes(channel, specs)
    assert None not in results
    coefficients = {k: Fraction(v) for k, v in results[-1]["coefficients"].items()}
    second_results = results[4:7]
    sum_2 = sum(v * r["n"] for v, r in zip(levels_2, second_results, strict=True))
    sum_22 = sum(v * v * r["n"] for v, r in zip(levels_2, second_results, strict=True))
    sum_2y = sum(v * total(r) for v, r in zip(levels_2, second_results, strict=True))
    # X^T X beta = X^T y, the row of x2: sum(x2) b0 + sum(x1 x2) b1 + sum(x2^2) b2 = sum(x2 y)
    sum_12 = (sum_2y - sum_2 * coefficients["intercept"] - sum_22 * coefficients[second]) / coefficients[
        first
    ]
    rows = [[int(a == r) for a in range(3) for _ in range(3)] for r in range(3)]  # each level's n
    rows += [[int(b == c) for _ in range(3) for b in range(3)] for c in range(2)]
    rows += [[int((a, b) == cell) for a in range(3) for b in range(3)] for cell in cells]
    rows.append([levels_1[a] * levels_2[b] for a in range(3) for b in range(3)])
    known = [r["n"] for r in results[1:4]] + [r["n"] for r in results[4:6]]
    known += [r["count"] for r in results[7:10]] + [sum_12]
    x = solve_exactly(rows, [int((a, b) == (i, j)) for a in range(3) for b in range(3)])
    assert x is not None
    cell = (DATA[first] == levels_1[i]) & (DATA[second] == levels_2[j])
    assert abs(sum(c * k for c, k in zip(x, known, strict=True)) - int(cell.sum())) < Fraction(1, 10**6)
    assert 0 < cell.sum() < 10
