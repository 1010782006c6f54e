"""The per-day cap on what a person adds to the history (an injected clock, no sleeping),
and the clock on the audit: one expensive decision holds the lock every person waits on for a
bounded time (``audit_clock``), through the gRPC API on the shipped sample."""

from __future__ import annotations

import json
import threading
import time

import grpc
import numpy as np
import pandas as pd
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from petlab.client.analyst import next_request, open_request, prepare
from petlab.client.knn_client import make_channel
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2_grpc
from petlab.server.controller.people import DAY, PersonPolicy
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.release_history import Released, ReleaseHistory

DATA = pd.read_csv(acs_sample_path())
DOMAIN = PublicDomain.shipped_for(DATA)


@pytest.fixture()
def server(serve, tmp_path):
    with serve(tmp_path, analysis_data=acs_sample_path(), open_analysis=True) as running:
        yield running


@pytest.fixture()
def stub(server):
    with make_channel(f"127.0.0.1:{server.port}") as channel:
        yield controller_pb2_grpc.AnalysisControllerStub(channel)


def count(low: int, high: int) -> dict:
    return {"type": "count", "where": {"age": {"between": [low, high]}}}


def test_the_per_day_cap_counts_24_hours_of_new_forms(server, stub):
    """Three new forms a day: another session of the same person on the same day is refused its
    fourth (RESOURCE_EXHAUSTED, nothing added); 24 hours later (the store's clock moved, no sleep)
    the same step runs."""
    now = [1.0e9]
    server.controller._sessions.clock = lambda: now[0]
    server.controller._policy = PersonPolicy(rows_per_session=100, rows_per_day=3)
    server.controller._history = ReleaseHistory(DATA, domain=DOMAIN)
    key = Ed25519PrivateKey.generate()
    first = prepare([count(20, 50), count(20, 55), count(20, 60)], key)
    session = stub.OpenSession(open_request(first), timeout=30).session_id
    for position in (1, 2, 3):
        assert stub.Next(next_request(first, session, position), timeout=30).result_json
    now[0] += 3600.0  # a new session, an hour later: the day is not over
    second = prepare([count(20, 65)], key)
    session = stub.OpenSession(open_request(second), timeout=30).session_id
    before = server.controller.history.audit.n_released
    with pytest.raises(grpc.RpcError) as failure:
        stub.Next(next_request(second, session, 1), timeout=30)
    assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "24 hours" in failure.value.details()
    assert server.controller.history.audit.n_released == before
    now[0] += DAY  # the first three forms are now more than 24 hours old
    reply = stub.Next(next_request(second, session, 1), timeout=30)
    assert json.loads(reply.result_json)["count"] == int(DATA.age.between(20, 65).sum())


BUDGET = 0.5  # seconds one decision may hold the history lock in the test below
BOUND = 2 * BUDGET + 2.5  # the holder's budget, the waiter's own, and slack for a loaded machine


def test_an_expensive_audit_holds_the_lock_a_bounded_time(server, stub):
    """The attack: a history of 150 released sets that split the records finely (random halves:
    well within the per-day cap) makes every later audit expensive (2.3 s for one count on this
    machine at a load average of 23, unclocked: a search of 2.3 x 10^8 units). Person A sends a
    count; person B sends a count while A's decision holds the lock. Both are answered within
    ``BOUND`` seconds (UNAVAILABLE with a retry hint, nothing recorded) instead of B waiting for
    A's whole audit."""
    rng = np.random.default_rng(7)
    history = ReleaseHistory(DATA, domain=DOMAIN)
    history.replay(
        Released(np.packbits(rng.random(len(DATA)) < 0.5).tobytes(), None, json.dumps({"bloat": i}))
        for i in range(150)
    )
    server.controller._history = history
    server.controller._audit_seconds = BUDGET
    before = history.n_released
    answers: dict[str, tuple[float, grpc.StatusCode, str]] = {}

    def ask(name: str, spec: dict, start: threading.Event | None = None) -> None:
        document = prepare([spec], Ed25519PrivateKey.generate())
        session = stub.OpenSession(open_request(document), timeout=30).session_id
        if start is not None:
            start.wait(10)
        began = time.monotonic()
        try:
            stub.Next(next_request(document, session, 1), timeout=60)
            answers[name] = (time.monotonic() - began, grpc.StatusCode.OK, "")
        except grpc.RpcError as exc:
            answers[name] = (time.monotonic() - began, exc.code(), exc.details())

    go = threading.Event()
    a = threading.Thread(target=ask, args=("a", count(20, 50), go))
    b = threading.Thread(target=ask, args=("b", count(30, 40), go))
    a.start()
    b.start()
    go.set()
    a.join(90)
    b.join(90)
    for name in ("a", "b"):
        elapsed, code, details = answers[name]
        assert elapsed < BOUND, f"person {name} waited {elapsed:.1f} s"
        assert code == grpc.StatusCode.UNAVAILABLE and "again" in details
    assert history.n_released == before  # nothing recorded
    server.controller._history = ReleaseHistory(DATA, domain=DOMAIN)  # the lock is free again
    ask("c", count(20, 50))
    assert answers["c"][1] == grpc.StatusCode.OK
