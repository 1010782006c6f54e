"""gRPC controller for binding analysis sequences (Domingo-Ferrer, PSD 2022, Sections 3-4).

OpenSession verifies the analyst's Ed25519 signature on T_0 (and a certification authority's
co-signature when the controller requires one, bound to this controller's id, data set and rules
digests, which Describe publishes, and an unexpired expiry). Each Next call recovers I_j from the revealed T_j
(equation (2)), checks the redundancy and the spec's hash (Proposition 2), interprets the analysis,
applies output checking and query-set-size control and returns the result, or aborts the session,
withholds the output and records why. Malformed requests (a trace of the wrong length, an unknown or
closed session) are refused with a gRPC status and leave the session as it was.

Refusals name a category only ("withheld: disclosure control"): the exact reason (a cell count, a
leverage, a set difference) is itself a figure computed from the confidential data, so it goes to
the controller's log, never to the analyst. Any exception while interpreting an analysis ends the
session with a generic abort; the traceback goes to the log.

Steps are serialised per analyst identity, not globally: one analyst's query-set history moves one
step at a time (a step reads it, checks against it and extends it atomically), while other
analysts' analyses run alongside.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import grpc
import numpy as np
import pandas as pd
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from petlab.crypto.chain.instructions import FORMAT_VERSION, SIZE, InvalidInstruction, canonical_json
from petlab.crypto.chain.traces import (
    CertificationScope,
    ChainState,
    load_public_key,
    next_analysis,
    public_key_bytes,
    verify_seal,
)
from petlab.protos import controller_pb2, controller_pb2_grpc
from petlab.server.common.call_log import logged_unary
from petlab.server.controller.analyses import AnalysisError, Evaluated, evaluate
from petlab.server.controller.configuration import ControllerIdentity
from petlab.server.controller.output_checking import Rules, check
from petlab.server.controller.query_set_control import QuerySetControl
from petlab.server.controller.session_store import ABORTED, FINISHED, SessionStore

log = logging.getLogger(__name__)
MAX_SPEC_BYTES = 64 * 1024
WITHHELD = "withheld: disclosure control"


def refusal_reason(
    evaluated: Evaluated, rules: Rules, n_records: int, released: list[np.ndarray]
) -> str | None:
    """Why this analysis's output may not be released after the ``released`` query sets (packed
    masks of this analyst's history), or None: output checking, then query-set-size control, then
    the exact audit of the whole history (``query_set_control``). The reason states exact figures:
    it is for the log only."""
    decision = check(evaluated, rules)
    if not decision.release:
        return "output checking: " + "; ".join(decision.reasons)
    control = QuerySetControl(n_records, rules.threshold, released)
    violation = control.violation(evaluated.query_sets) or control.isolated_record(evaluated.query_sets)
    return f"query-set-size control: {violation}" if violation else None


class ControllerServicer(controller_pb2_grpc.AnalysisControllerServicer):
    def __init__(
        self,
        data: pd.DataFrame,
        sessions: SessionStore,
        rules: Rules | None = None,
        authority_key: Ed25519PublicKey | None = None,
        analysts: frozenset[bytes] | None = None,
        cooldown_seconds: float = 0.0,
        identity: ControllerIdentity | None = None,
    ):
        """``analysts``: raw public keys allowed to analyse (an allow-list); with an
        ``authority_key`` a key outside the list may still analyse with the authority's
        co-signature; with neither, anyone may (``--open-analysis``, for demos). After an abort,
        the same identity may open no session for ``cooldown_seconds``. ``identity`` is what an
        authority's co-signature must name (required with an ``authority_key``)."""
        if authority_key is not None and identity is None:
            raise ValueError("a controller with a certification authority needs its identity")
        self._data, self._sessions = data, sessions
        self._rules = rules or Rules()
        self._authority = authority_key
        self._analysts = analysts
        self._cooldown = cooldown_seconds
        self._identity = identity
        self._analyst_locks: dict[bytes, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock_of(self, analyst_key: bytes) -> threading.Lock:
        with self._locks_guard:
            return self._analyst_locks.setdefault(analyst_key, threading.Lock())

    @logged_unary
    def Describe(self, request, context):
        if self._identity is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this controller has no published identity")
        return controller_pb2.ControllerDescription(
            controller_id=self._identity.controller_id,
            dataset_sha256=self._identity.dataset_sha256,
            rules_sha256=self._identity.rules_sha256,
            instruction_format=FORMAT_VERSION,
        )

    @logged_unary
    def OpenSession(self, request, context):
        if len(request.first_trace) != SIZE:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"T_0 must be {SIZE} bytes, got {len(request.first_trace)}"
            )
        try:
            analyst = load_public_key(request.analyst_public_key)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"analyst public key: {exc}")
        identity = public_key_bytes(analyst)
        listed = self._analysts is not None and identity in self._analysts
        if self._analysts is not None and not listed and self._authority is None:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "this analyst key is not registered here")
        certified = not listed and self._authority is not None
        try:
            scope = (
                CertificationScope(
                    self._identity.controller_id,
                    self._identity.dataset_sha256,
                    self._identity.rules_sha256,
                    request.authority_expires,
                )
                if certified and self._identity is not None and request.authority_expires
                else None
            )
            verify_seal(
                request.first_trace,
                analyst,
                request.analyst_signature,
                self._authority if certified else None,
                (request.authority_signature or None) if certified else None,
                scope,
            )
        except ValueError as exc:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        aborted = self._sessions.last_abort(identity)
        if self._cooldown and aborted is not None and time.time() - aborted < self._cooldown:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "an analysis of yours was withheld recently; this controller opens no new session for "
                f"you until {self._cooldown:g} s after it",
            )
        session = self._sessions.open(identity, request.first_trace)
        if session is None:
            context.abort(
                grpc.StatusCode.ALREADY_EXISTS,
                "a session was already opened with this T_0; a sequence runs once",
            )
        return controller_pb2.OpenSessionResponse(session_id=session.session_id)

    @logged_unary
    def Next(self, request, context):
        found = self._sessions.get(request.session_id)
        if found is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "no such session")
        with self._lock_of(found.analyst_key):  # module docstring: one step per analyst at a time
            remaining = context.time_remaining()
            if not context.is_active() or (remaining is not None and remaining <= 0):
                # the caller gave up, or its deadline passed, while waiting: the step does not run
                context.abort(grpc.StatusCode.CANCELLED, "the call ended before its turn; nothing ran")
            session = self._sessions.get(request.session_id)
            if session is None:
                context.abort(grpc.StatusCode.NOT_FOUND, "no such session")
            if session.status in (ABORTED, FINISHED):
                context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"the session is {session.status}" + (f": {session.reason}" if session.reason else ""),
                )
            if len(request.trace) != SIZE:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"a trace is {SIZE} bytes, got {len(request.trace)}"
                )
            if len(request.spec) > MAX_SPEC_BYTES:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"a spec is at most {MAX_SPEC_BYTES} bytes")
            position = session.position + 1
            revealed = {request.pointer: request.spec} if request.pointer else {}
            state = ChainState(session.previous_trace, session.position)
            try:
                new_state, spec_bytes = next_analysis(state, request.trace, revealed)
            except InvalidInstruction as exc:
                return self._abort(session, position, str(exc), category=f"the sequence was changed: {exc}")
            try:
                spec = json.loads(spec_bytes)
                if not isinstance(spec, dict) or canonical_json(spec) != spec_bytes:
                    raise AnalysisError("the spec is not a canonical JSON object")
                evaluated = evaluate(spec, self._data)
            except (ValueError, AnalysisError) as exc:  # the spec's fault, stated without data
                self._sessions.abort(session, f"analysis {position}: cannot run")
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"analysis {position} cannot run, so the session is aborted: {exc}",
                )
            except Exception:  # never Python's message to the analyst; the session ends cleanly
                log.exception("session %s: analysis %d failed", session.session_id, position)
                return self._abort(session, position, "internal error", category="the analysis failed")
            refusal = refusal_reason(
                evaluated, self._rules, len(self._data), self._sessions.released_sets(session.analyst_key)
            )
            if refusal:
                return self._abort(session, position, refusal)
            packed = [np.packbits(m) for m in evaluated.query_sets]
            self._sessions.advance(session, request.trace, new_state.finished, packed)
            return controller_pb2.NextResponse(
                position=position,
                last=new_state.finished,
                result_json=json.dumps(evaluated.result, sort_keys=True),
            )

    def _abort(self, session, position: int, reason: str, category: str = WITHHELD):
        """End the session: the analyst (and the session record) get ``category``; the exact
        ``reason``, which may state figures from the confidential data, goes to the log only."""
        public = f"analysis {position}: {category}"
        self._sessions.abort(session, public)
        log.info("session %s aborted at analysis %d: %s", session.session_id, position, reason)
        return controller_pb2.NextResponse(position=position, last=True, abort_reason=public)
