"""Attacks on definitions and regions, through the gRPC API on the shipped 5,000-record ACS sample, with the
default person limits: regions of the public domain shown empty by three counts, equal definitions
judged on the values present, a refusal's position telling a record's hours, and a history grown
without bound by repeats. Each test runs the attack against the controller as it is and again with
the one protection switched off, where it recovers the confidential fact (or grows the history):
so each fails if its protection is removed.
"""

from __future__ import annotations

import json
import threading

import grpc
import numpy as np
import pandas as pd
import pytest
from controller_calls import outcomes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from petlab.client.analyst import next_request, open_request, prepare
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2_grpc
from petlab.server.controller.people import PersonPolicy
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.release_history import ReleaseHistory

DATA = pd.read_csv(acs_sample_path())
DOMAIN = PublicDomain.shipped_for(DATA)
T = 10


@pytest.fixture()
def server(serve, tmp_path):
    with serve(tmp_path, analysis_data=acs_sample_path(), open_analysis=True) as running:  # default limits
        yield running


def fresh_history(server) -> None:
    """A new, empty release history (each attack below starts from nothing released)."""
    server.controller._history = ReleaseHistory(DATA, domain=DOMAIN)


def count(**where) -> dict:
    return {"type": "count", "where": where}


def _targets() -> list[tuple[int, int, int, pd.Series]]:  # for the three counts
    """(decade start, the target's occupation, a common occupation, the target): the target is the
    only record of its occupation in its decade of age."""
    out = []
    for low in range(20, 60, 10):
        decade = DATA.age.between(low, low + 9)
        counts = DATA[decade].occ.value_counts()
        for occupation in counts[counts == 1].index:
            target = DATA[decade & (DATA.occ == occupation)].iloc[0]
            out.append((low, int(occupation), int(counts.index[0]), target))
    return out


# ---------------------------------------------------------------- 1. three counts, one empty region


def three_counts(low: int, occupation: int, common: int) -> list[dict]:
    """Q1 = Q plus the target, Q1 in class 1, Q in class 2: c1 - c2 - c3 counts the target's cells
    in class 2, 0 exactly when the target is in class 1."""
    ages = {"between": [low, low + 9]}
    return [
        count(age=ages, occ={"in": [common, occupation]}),
        count(age=ages, occ={"in": [common, occupation]}, incc={"eq": 1}),
        count(age=ages, occ={"eq": common}, incc={"eq": 2}),
    ]


def test_three_counts_do_not_show_an_empty_region(server, channel, monkeypatch):
    """The third count is withheld whatever the target's class (an empty region here, a determined
    record in the other case), so the refusal tells nothing; with the region audit switched off it
    is released when the target is in class 1, and c1 - c2 - c3 = 0 gives the class exactly."""
    by_class = {}
    for low, occupation, common, target in _targets():
        by_class.setdefault(int(target.incc), (low, occupation, common))
    assert set(by_class) == {1, 2}
    for _, (low, occupation, common) in sorted(by_class.items()):
        fresh_history(server)
        results = outcomes(channel, three_counts(low, occupation, common))
        assert results[:2] != [None, None] and results[2] is None  # the same answer for both classes
    low, occupation, common = by_class[1]
    fresh_history(server)
    server.controller._history.regions = False
    c1, c2, c3 = outcomes(channel, three_counts(low, occupation, common))
    assert c1["count"] - c2["count"] - c3["count"] == 0  # the target's class follows: 1
    ages, incomes = DATA.age.between(low, low + 9), DATA.incc
    assert int(incomes[ages & (DATA.occ == occupation)].iloc[0]) == 1


# ---------------------------------------------------------------- 2. equal definitions


def test_equal_definitions_are_judged_on_the_public_domain(server, channel, monkeypatch):
    """hpw in {40, 51} and hpw = 40 select different cells of the domain (51 hours is a value of
    it) but the same records (nobody in the sample works 51 hours): the second is withheld. Judged
    on the values present in the data, both definitions admit 40 only and both counts come back,
    showing an empty cell."""
    assert not (DATA.hpw == 51).any() and 51 in DOMAIN.values["hpw"]
    specs = [count(hpw={"in": [40, 51]}), count(hpw={"eq": 40})]
    fresh_history(server)
    first, second = outcomes(channel, specs)
    assert first is not None and second is None
    fresh_history(server)
    monkeypatch.setattr(server.controller, "_domain", None)  # definitions from the values present
    first, second = outcomes(channel, specs)
    assert first["count"] == second["count"] == int((DATA.hpw == 40).sum())  # nobody works 51 hours


# ---------------------------------------------------------------- 3. the refusal's position


def probes(low: int, occupation: int, hours: list[int]) -> list[dict]:
    """Q1 (the target's decade of age; the target is the only one of its occupation there), then for
    each k, with H_k = hours[:k] (the hours tried so far): Q1 outside H_k, and the block (Q1 without
    the target's occupation) inside H_k. c1 - c2_k - c3_k = 1 if the target works one of H_k, else 0."""
    ages = {"between": [low, low + 9]}
    out = [count(age=ages)]
    for k in range(1, len(hours) + 1):
        tried = hours[:k]
        others = [v for v in DOMAIN.values["hpw"] if v not in tried]
        out.append(count(age=ages, hpw={"in": others}))
        out.append(count(age=ages, occ={"ne": occupation}, hpw={"in": tried}))
    return out


def first_refusal(results: list[dict | None]) -> int:
    return results.index(None) + 1 if None in results else 0


def test_a_refusal_position_tells_nothing_of_the_hours(server, channel):
    """One session per target, one refusal each (the default budget is 3): probes over the hours
    worked by more than t of the block, in increasing order. With the region audit the first probe
    is withheld whatever the target's hours (an empty region, or a determined record): the position
    carries 0 bits. Switched off, the first refusal falls at the probe that adds the target's hours:
    the exact value (log2 of 12 or 15 candidates from one refusal)."""
    cases = []
    for low in range(16, 60):
        decade = DATA.age.between(low, low + 9)
        counts = DATA[decade].occ.value_counts()
        for occupation in counts[counts == 1].index:
            target = DATA[decade & (DATA.occ == occupation)].iloc[0]
            frequent = DATA[decade & (DATA.occ != occupation)].hpw.value_counts()
            hours = sorted(int(v) for v in frequent[frequent > T].index)
            if int(target.hpw) in hours[1:] and int(target.hpw) not in {case[3] for case in cases}:
                cases.append((low, int(occupation), hours, int(target.hpw)))
    assert len(cases) >= 2
    positions = []
    for low, occupation, hours, _ in cases[:2]:
        fresh_history(server)
        positions.append(first_refusal(outcomes(channel, probes(low, occupation, hours))))
    assert positions == [3, 3]  # the first probe's second count, for both targets
    for low, occupation, hours, value in cases[:2]:
        fresh_history(server)
        server.controller._history.regions = False
        position = first_refusal(outcomes(channel, probes(low, occupation, hours)))
        assert position % 2 == 1 and hours[(position - 1) // 2 - 1] == value  # the exact hours


# ---------------------------------------------------------------- 4. the history's growth


def test_repeats_add_nothing_and_a_person_adds_at_most_the_caps(server, channel, monkeypatch):
    """Twenty repeats of one quantile analysis in one session add its rows once (with the
    deduplication switched off, every repeat adds them again, and the audit's cost with them). A
    person who would add more new
    forms than the per-session cap gets RESOURCE_EXHAUSTED, nothing added."""
    fresh_history(server)
    quantiles = {"type": "quantiles", "column": "hpw", "probabilities": [0.25, 0.5, 0.75]}
    assert None not in outcomes(channel, [quantiles])
    once = server.controller.history.audit.n_released
    assert None not in outcomes(channel, [quantiles] * 20)
    assert server.controller.history.audit.n_released == once
    stored = server.controller._sessions._db.execute("SELECT COUNT(*) FROM releases").fetchone()[0]
    assert stored == once
    monkeypatch.setattr(ReleaseHistory, "fresh", lambda self, rows: list(rows))  # no deduplication
    monkeypatch.setattr(ReleaseHistory, "_new_rows", lambda self, rows: list(rows))
    assert None not in outcomes(channel, [quantiles] * 20)
    assert server.controller.history.audit.n_released >= 21 * once

    monkeypatch.undo()
    server.controller._policy = PersonPolicy(rows_per_session=4)
    table = {"type": "frequency", "rows": "sex", "columns": "incc", "where": {"age": {"between": [30, 60]}}}
    document = prepare([count(age={"between": [20, 50]}), table], Ed25519PrivateKey.generate())
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    session = stub.OpenSession(open_request(document), timeout=30).session_id
    assert stub.Next(next_request(document, session, 1), timeout=30).result_json
    before = server.controller.history.audit.n_released
    with pytest.raises(grpc.RpcError) as failure:  # 1 + the 4 cells > 4
        stub.Next(next_request(document, session, 2), timeout=30)
    assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert server.controller.history.audit.n_released == before


def test_a_busy_history_lock_is_refused_with_a_retry_hint(server, channel, monkeypatch):
    """While another decision holds the history's lock, a step waits at most ``lock_seconds`` and
    is refused with UNAVAILABLE, nothing changed; sent again, it runs."""
    monkeypatch.setattr(server.controller, "_lock_seconds", 0.2)
    document = prepare([count(age={"between": [20, 50]})], Ed25519PrivateKey.generate())
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    session = stub.OpenSession(open_request(document), timeout=30).session_id
    lock: threading.Lock = server.controller._release_lock
    assert lock.acquire(timeout=5)
    try:
        with pytest.raises(grpc.RpcError) as failure:
            stub.Next(next_request(document, session, 1), timeout=30)
    finally:
        lock.release()
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE and "again" in failure.value.details()
    reply = stub.Next(next_request(document, session, 1), timeout=30)
    assert json.loads(reply.result_json)["count"] == int(DATA.age.between(20, 50).sum())
    assert np.isfinite(server.controller._lock_seconds)


# ---------------------------------------------------------------- the two ranks against brute force


def test_the_region_audit_ranks_equal_brute_force():
    """Random boxes (counts and weighted sums, products of columns) over a small domain whose cells
    can be listed: the incremental ranks over the records and over the cells (Gram matrices factored
    by column, Schur complements, chunks of forms) equal the ranks of the explicit matrices."""
    from petlab.server.controller.analyses import definition
    from petlab.server.controller.region_audit import RegionAudit, RegionForm
    from petlab.server.controller.release_audit import Functional, ReleaseAudit

    rng = np.random.default_rng(30)
    domain = PublicDomain({"a": (1, 2, 3), "b": (1, 2, 3, 4), "c": (2, 5)})
    data = pd.DataFrame({c: rng.choice(v, size=25) for c, v in domain.values.items()})
    cells = pd.MultiIndex.from_product(domain.values.values(), names=list(domain.values)).to_frame(
        index=False
    )
    gaps = []
    for _ in range(6):
        audit = ReleaseAudit(data, primes=(1_000_000_007,))
        region = RegionAudit(audit, domain)
        on_records, on_cells = [np.ones(len(data))], [np.ones(len(cells))]
        for _ in range(int(rng.integers(1, 5))):
            forms, functionals = [], []
            for _ in range(int(rng.integers(1, 9))):
                box = {
                    c: sorted(rng.choice(v, size=int(rng.integers(1, len(v) + 1)), replace=False).tolist())
                    for c, v in domain.values.items()
                    if rng.random() < 0.6
                }
                weight = [None, None, "a", "a*b", "c*c"][int(rng.integers(0, 5))]
                members = np.ones(len(data), dtype=bool)
                in_cells = np.ones(len(cells), dtype=bool)
                for column, values in box.items():
                    members &= data[column].isin(values).to_numpy()
                    in_cells &= cells[column].isin(values).to_numpy()
                weigh_records, weigh_cells = np.ones(len(data)), np.ones(len(cells))
                for column in weight.split("*") if weight else []:
                    weigh_records = weigh_records * data[column].to_numpy()
                    weigh_cells = weigh_cells * cells[column].to_numpy()
                on_records.append(members * weigh_records)
                on_cells.append(in_cells * weigh_cells)
                functional = Functional.of(members, weight)
                functionals.append(functional)
                forms.append(RegionForm(functional.members, weight, definition(box, dict(domain.values))))
            audit.record(functionals)
            region.record(forms, audit._atoms)
        expected = (np.linalg.matrix_rank(np.array(on_records)), np.linalg.matrix_rank(np.array(on_cells)))
        assert region.ranks() == expected
        assert region.gap == expected[1] - expected[0]
        gaps.append(region.gap)
    assert max(gaps) > 0 and min(gaps) == 0  # both cases occur
