"""The calls the controller's tests make through the analyst's gRPC stub: open a session, reveal
one analysis, the status a refused call ends with, and a whole sequence's outcomes. Imported by
the test modules of this room (pytest's prepend import mode puts this folder on ``sys.path``)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from petlab.client.analyst import next_request, open_request, prepare, run


def open_session(stub, document: dict, timeout: float = 30) -> str:
    """``OpenSession`` for a prepared sequence ``document``: the session's id."""
    return stub.OpenSession(open_request(document), timeout=timeout).session_id


def reveal(stub, session_id: str, document: dict, j: int, timeout: float = 60):
    """``Next`` for analysis ``j`` (from 1) of ``document`` in ``session_id``: the reply."""
    return stub.Next(next_request(document, session_id, j), timeout=timeout)


def status_of(call: Callable[..., Any], *args) -> grpc.StatusCode:
    """The status ``call(*args, timeout=30)`` fails with; the test fails if the call succeeds or
    its failure carries no message."""
    with pytest.raises(grpc.RpcError) as failure:
        call(*args, timeout=30)
    assert failure.value.details()
    return failure.value.code()


def outcomes(channel, specs: list[dict], document: dict | None = None) -> list[dict | None]:
    """Run a sequence through the analyst's ``run``: ``document``, or ``specs`` under a fresh key
    (a fresh person under open analysis). Each analysis's result, None where withheld (the session
    ends there)."""
    out = io.StringIO()
    run(document or prepare(specs, Ed25519PrivateKey.generate()), channel, out=out)
    results: list[dict | None] = []
    for line in out.getvalue().splitlines():
        if line.startswith("analysis "):
            body = line.split(": ", 1)[1]
            results.append(None if body.startswith("ABORTED") else json.loads(body))
    return results
