"""gRPC controller for binding analysis sequences (Domingo-Ferrer, PSD 2022, Sections 3-4).

OpenSession verifies the analyst's Ed25519 signature on T_0 (and a certification authority's
co-signature when the controller requires one, bound to this controller's id, data set and rules
digests, which Describe publishes, an unexpired expiry and the person the key belongs to), and
finds the person behind the key (``people``). Each Next call recovers I_j from the revealed T_j
(equation (2)), checks the redundancy and the spec's hash (Proposition 2), interprets the analysis
and decides on it against everything released before, to anyone (``release_history``): it returns
the result, or aborts the session, withholds the output and records why. Malformed requests (a trace
of the wrong length, an unknown or closed session) are refused with a gRPC status and leave the
session as it was.

Refusals name a category only ("withheld: disclosure control"): the exact reason (a cell count, a
leverage, a set difference) is itself a figure computed from the confidential data, so it goes to
a diagnostics file marked confidential (``ConfidentialDiagnostics``: owner-only, under the data
directory), never to the analyst, and never to the ordinary log, which names the session only.
So does the finding, at start, that the history already determines a small group under changed
rules (a bit of the records).
Any exception while interpreting an analysis, numpy's and pandas's ValueErrors included, ends the
session with a generic abort counted as a refusal (whether it happens can depend on the records);
its traceback goes to the confidential diagnostics, the log names the session.

People: before every analysis (OpenSession and each Next) the person's record is checked: a
suspended person is refused (PERMISSION_DENIED, and the session closes), a person in the cool-down
after a refusal (FAILED_PRECONDITION) or over the daily quota (RESOURCE_EXHAUSTED) waits. A refusal
is counted against the person and closes every open session of theirs; at the refusal budget the
person is suspended until the data owner lifts it (``petlab-server persons lift``).

Concurrency: steps are serialised per person (a person's sessions move one step at a time), while
other persons' analyses are evaluated alongside; the decision and the record of a release happen
under one lock for the whole history (read, check, extend atomically), since every analysis is
audited against everything released. A step waits at most ``lock_seconds`` for that lock; past it
the step is refused with UNAVAILABLE and a retry hint, nothing changed, so one person's expensive
history never stalls the others for longer. What one person adds to the history is
capped per session and per day (``PersonPolicy.rows_per_session``, ``rows_per_day``: new released
forms, repeats are free), the audits' memory is capped from public figures (``release_history``)
and their work is clocked: a decision that passes ``audit_seconds`` (``audit_clock``) is stopped, answered
UNAVAILABLE with a retry hint and nothing recorded, so the lock is held for at most that budget plus
one block of work, however slow the machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

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
from petlab.errors import PetlabError, Unavailable
from petlab.protos import controller_pb2, controller_pb2_grpc
from petlab.server.common.rpc_errors import (
    AlreadyExists,
    CallCancelled,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    ResourceExhausted,
    Unauthenticated,
)
from petlab.server.controller.analyses import AnalysisError, Evaluated, evaluate
from petlab.server.controller.audit_clock import AuditOverrun, audit_budget
from petlab.server.controller.configuration import ControllerIdentity
from petlab.server.controller.output_checking import Rules
from petlab.server.controller.people import PersonPolicy, barrier, key_person
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.release_history import ReleaseHistory, released_functionals
from petlab.server.controller.session_store import ABORTED, CLOSED, FINISHED, Session, SessionStore

log = logging.getLogger(__name__)
diagnostics_log = logging.getLogger("petlab.server.controller.diagnostics")  # confidential figures
DIAGNOSTICS_HEADER = (
    "# CONFIDENTIAL: petlab controller diagnostics. The reasons below state exact figures computed\n"
    "# from the confidential records (cell counts, group sizes, set differences): keep this file with\n"
    "# the data, never share it with analysts or ship it to a shared log.\n"
)
MAX_SPEC_BYTES = 64 * 1024
LOCK_SECONDS = 5.0  # the longest a step waits for the one history lock
AUDIT_SECONDS = 2.0  # the longest one decision holds that lock (``audit_clock``)
WITHHELD = "withheld: disclosure control"
_BARRIER_ERROR: dict[str, type[PetlabError]] = {
    "suspended": PermissionDenied,
    "cooldown": PreconditionFailed,
    "quota": ResourceExhausted,
}


class ConfidentialDiagnostics:
    """Where exact refusal reasons go: an owner-only file (created 0600, never through a symbolic
    link) that opens with ``DIAGNOSTICS_HEADER``; without a file (the library used directly), the
    ``petlab.server.controller.diagnostics`` logger, which its user routes."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self._lock = threading.Lock()

    def write(self, message: str) -> None:
        if self.path is None:
            diagnostics_log.info("%s", message)
            return
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        with self._lock:
            descriptor = os.open(self.path, flags, 0o600)
            with os.fdopen(descriptor, "a") as handle:
                if handle.tell() == 0:
                    handle.write(DIAGNOSTICS_HEADER)
                handle.write(line)


def refusal_reason(evaluated: Evaluated, history: ReleaseHistory) -> str | None:
    """Why this analysis's output may not be released after everything in ``history``, or None
    (``release_history``: output checking, empty cells, query-set-size control, the exact audit).
    The reason states exact figures: it is for the log only."""
    return history.refusal(evaluated)


class ControllerServicer(controller_pb2_grpc.AnalysisControllerServicer):
    def __init__(
        self,
        data: pd.DataFrame,
        sessions: SessionStore,
        rules: Rules | None = None,
        authority_key: Ed25519PublicKey | None = None,
        analysts: Mapping[bytes, str] | None = None,
        policy: PersonPolicy | None = None,
        identity: ControllerIdentity | None = None,
        history: ReleaseHistory | None = None,
        diagnostics: Path | None = None,
        domain: PublicDomain | None = None,
        lock_seconds: float = LOCK_SECONDS,
        audit_seconds: float = AUDIT_SECONDS,
    ):
        """``analysts``: raw public keys allowed to analyse, each with its person (an allow-list);
        with an ``authority_key`` a key outside the list may still analyse with the authority's
        co-signature, which names the person; with neither, anyone may (``--open-analysis``, for
        demos; every key is then its own person). ``policy``: refusal budget, cool-down and quota
        per person. ``identity`` is what an authority's co-signature must name (required with an
        ``authority_key``); its data digest keys the release history, which is replayed from
        ``sessions`` (a changed data file starts a new, empty one, and the log says so).
        ``diagnostics``: the confidential file exact refusal reasons go to (module docstring).
        ``domain``: the public attribute domain (``public_domain``): definitions, table levels and
        the region audit use it; without it (library use) they fall back on the values present.
        ``lock_seconds``: the longest a step waits for the history's lock before it is refused with
        UNAVAILABLE and a retry hint (module docstring). ``audit_seconds``: the longest one decision
        may hold that lock (``audit_clock``); past it, UNAVAILABLE and a retry hint, nothing recorded."""
        self._lock_seconds = lock_seconds
        self._audit_seconds = audit_seconds
        if authority_key is not None and identity is None:
            raise ValueError("a controller with a certification authority needs its identity")
        self._data, self._sessions = data, sessions
        self._rules = rules or Rules()
        self._authority = authority_key
        self._analysts = analysts
        self._policy = policy or PersonPolicy()
        self._identity = identity
        self._person_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._release_lock = threading.Lock()
        # the history is keyed by the data's plain SHA-256, in the owner's database only; the log
        # names the published, keyed digest (``configuration``), or no digest without an identity
        if identity is not None:
            self._data_sha256, self._rules_sha256 = identity.history_key.hex(), identity.rules_sha256.hex()
            self._data_named = f"the data file with digest {identity.dataset_sha256.hex()}"
        else:
            self._data_sha256 = hashlib.sha256(data.to_csv(index=False).encode()).hexdigest()
            self._rules_sha256 = hashlib.sha256(canonical_json(self._rules.__dict__)).hexdigest()
            self._data_named = "this data set"
        self.diagnostics = ConfidentialDiagnostics(diagnostics)
        self._domain = domain
        if domain is not None:
            domain.check_covers(data)
        self._history = history or ReleaseHistory(data, self._rules, domain=domain)
        self._start_history()

    def _start_history(self) -> None:
        start = self._sessions.start_history(self._data_sha256, len(self._data))
        self._history.replay(start.releases)
        if start.new:
            log.info("a new, empty release history starts for %s", self._data_named)
        else:
            log.info(
                "release history of %s: %d functionals released before", self._data_named, len(start.releases)
            )
        for count in start.other_histories.values():
            log.warning(
                "the database also holds %d released functionals on another data file; "
                "they are not audited against this one: analysts who saw both can difference them",
                count,
            )
        if start.legacy_sets:
            log.warning(
                "%d query sets stored per key name no data file; they are not used",
                start.legacy_sets,
            )
        assert self._history.audit is not None
        finding = self._history.audit.check([]) if start.releases else None
        if finding is not None:  # a bit of the records (who falls in the released sets): confidential
            self.diagnostics.write(
                "the release history already determines a group below the threshold under the current "
                f"rules (they changed since): every analysis will be refused ({finding.reason})"
            )

    @property
    def history(self) -> ReleaseHistory:
        return self._history

    def _lock_of(self, person: str) -> threading.Lock:
        with self._locks_guard:
            return self._person_locks.setdefault(person, threading.Lock())

    def Describe(self, request, context):
        if self._identity is None:
            raise PreconditionFailed("this controller has no published identity")
        return controller_pb2.ControllerDescription(
            controller_id=self._identity.controller_id,
            dataset_sha256=self._identity.dataset_sha256,
            rules_sha256=self._identity.rules_sha256,
            instruction_format=FORMAT_VERSION,
        )

    def OpenSession(self, request, context):
        if len(request.first_trace) != SIZE:
            raise InvalidRequest(f"T_0 must be {SIZE} bytes, got {len(request.first_trace)}")
        try:
            analyst = load_public_key(request.analyst_public_key)
        except ValueError as exc:
            raise InvalidRequest(f"analyst public key: {exc}") from exc
        key = public_key_bytes(analyst)
        listed = self._analysts is not None and key in self._analysts
        if self._analysts is not None and not listed and self._authority is None:
            raise PermissionDenied("this analyst key is not registered here")
        certified = not listed and self._authority is not None
        try:
            scope = (
                CertificationScope(
                    self._identity.controller_id,
                    self._identity.dataset_sha256,
                    self._identity.rules_sha256,
                    request.authority_expires,
                    request.person_id,
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
            raise Unauthenticated(str(exc)) from exc
        person = self._person_of(key, scope if certified else None)
        with self._lock_of(person):
            self._check_person(person, context)
            session = self._sessions.open(key, request.first_trace, person)
        if session is None:
            raise AlreadyExists(
                "a session was already opened with this T_0; a sequence runs once",
            )
        return controller_pb2.OpenSessionResponse(session_id=session.session_id)

    def _person_of(self, key: bytes, scope: CertificationScope | None) -> str:
        """The person behind an authenticated key (``people``): the allow-list's, the one the
        authority's co-signature names, or (open analysis) the key itself."""
        if self._analysts is not None and key in self._analysts:
            return self._analysts[key]
        if scope is not None:
            return scope.person_id
        return key_person(key)

    def _history_for(self, person: str) -> ReleaseHistory:
        """The history an analysis of ``person`` is audited against: the one global history, for
        everyone (whatever one analyst receives, all may know)."""
        return self._history

    def _check_person(self, person: str, context, session: Session | None = None) -> None:
        """Abort the call if the person may not analyse now (``people``); a suspension also closes
        ``session``."""
        stop = barrier(self._sessions.person(person), self._policy, self._sessions.clock())
        if stop is None:
            return
        if session is not None and stop.kind == "suspended":
            self._sessions.close_session(session, f"closed: {stop.message}")
        raise _BARRIER_ERROR[stop.kind](stop.message)

    def Next(self, request, context):
        found = self._sessions.get(request.session_id)
        if found is None:
            raise NotFound("no such session")
        with self._lock_of(found.person):  # module docstring: one step per person at a time
            remaining = context.time_remaining()
            if not context.is_active() or (remaining is not None and remaining <= 0):
                # the caller gave up, or its deadline passed, while waiting: the step does not run
                raise CallCancelled("the call ended before its turn; nothing ran")
            session = self._sessions.get(request.session_id)
            if session is None:
                raise NotFound("no such session")
            if session.status in (ABORTED, FINISHED, CLOSED):
                raise PreconditionFailed(
                    f"the session is {session.status}" + (f": {session.reason}" if session.reason else ""),
                )
            if len(request.trace) != SIZE:
                raise InvalidRequest(f"a trace is {SIZE} bytes, got {len(request.trace)}")
            if len(request.spec) > MAX_SPEC_BYTES:
                raise InvalidRequest(f"a spec is at most {MAX_SPEC_BYTES} bytes")
            self._check_person(session.person, context, session)
            return self._step(session, request, context)

    def _step(self, session: Session, request, context):
        position = session.position + 1
        revealed = {request.pointer: request.spec} if request.pointer else {}
        state = ChainState(session.previous_trace, session.position)
        try:
            new_state, spec_bytes = next_analysis(state, request.trace, revealed)
        except InvalidInstruction as exc:  # the analyst's own bytes: no data involved, not a refusal
            return self._abort(session, position, str(exc), f"the sequence was changed: {exc}", refusal=False)
        try:
            try:
                spec = json.loads(spec_bytes)
                canonical = isinstance(spec, dict) and canonical_json(spec) == spec_bytes
            except RecursionError:  # nested deeper than Python's JSON recurses: not a spec either
                canonical = False
            if not canonical:
                raise AnalysisError("the spec is not a canonical JSON object")
        except ValueError as exc:  # the analyst's own bytes: no data involved
            self._cannot_run(session, position, context, exc, False)
        try:
            evaluated = evaluate(spec, self._data, self._domain, self._rules.quantile_probabilities)
        except AnalysisError as exc:  # our own sentence, stated without figures of the data
            self._cannot_run(session, position, context, exc, exc.data_dependent)
        except Exception:  # never Python's message to the analyst; the session ends cleanly
            # numpy's and pandas's ValueErrors too (LinAlgError "SVD did not converge" when the set
            # holds an infinite value): whether they happen depends on the records
            return self._failed(session, position, "the analysis")
        history = self._history_for(session.person)
        if not self._release_lock.acquire(timeout=self._lock_seconds):
            # nothing changed: the same step can be sent again (module docstring)
            raise Unavailable(
                f"the controller is deciding another analysis; send this step again in "
                f"{self._lock_seconds:g} s or more",
            )
        try:  # module docstring: decide and record against one history
            rows = history.fresh(released_functionals(evaluated))
            self._check_row_caps(session, len(rows), context)
            try:
                with audit_budget(self._audit_seconds):
                    reason = refusal_reason(evaluated, history)
            except AuditOverrun:  # nothing decided, nothing recorded: the step can be sent again
                log.warning(
                    "session %s: the audit passed its %g s budget", session.session_id, self._audit_seconds
                )
                raise Unavailable(
                    f"the audit of this step would hold the controller longer than "
                    f"{self._audit_seconds:g} s; nothing ran; send it again later or split the analysis",
                ) from None
            except Exception:  # the decision failed: nothing is released, the session ends cleanly
                return self._failed(session, position, "the decision on the analysis")
            if reason:
                return self._abort(session, position, reason)
            self._sessions.advance(
                session, request.trace, new_state.finished, self._data_sha256, self._rules_sha256, rows
            )
            history.replay(rows)
        finally:
            self._release_lock.release()
        return controller_pb2.NextResponse(
            position=position,
            last=new_state.finished,
            result_json=json.dumps(evaluated.result, sort_keys=True),
        )

    def _check_row_caps(self, session: Session, rows: int, context) -> None:
        """Refuse (RESOURCE_EXHAUSTED, the session unchanged) a step that would take the person past
        the new rows they may add to the history per session or per day (``people.PersonPolicy``).
        The count is of definitions not released before (a regression's rows are its weighted
        sets, whatever levels the data holds), so the decision depends on the specs and the
        history, not on the records."""
        if not rows:
            return
        in_session, in_day = self._sessions.rows_added(session.person, session.session_id)
        if in_session + rows > self._policy.rows_per_session:
            raise ResourceExhausted(
                f"this step would add more than {self._policy.rows_per_session} new released forms in "
                "one session; open a new session to continue",
            )
        if in_day + rows > self._policy.rows_per_day:
            raise ResourceExhausted(
                f"this step would add more than {self._policy.rows_per_day} new released forms in 24 "
                "hours; send it again later",
            )

    def _cannot_run(self, session: Session, position: int, context, exc: Exception, depends_on_data: bool):
        """The spec cannot run: the analyst is told why (a sentence that names no figure of the
        data); a reason that depends on the records counts as a refusal."""
        self._record_abort(session, f"analysis {position}: cannot run", depends_on_data)
        raise InvalidRequest(
            f"analysis {position} cannot run, so the session is aborted: {exc}",
        )

    def _failed(self, session: Session, position: int, what: str):
        """An exception while running ``what``: a generic abort, counted as a refusal (whether it
        happens can depend on the records). Its message and traceback may state figures of the
        records (numpy and pandas quote values), so they go to the confidential diagnostics; the
        ordinary log names the session only."""
        log.error("session %s: %s %d failed (see the diagnostics)", session.session_id, what, position)
        details = f"{what} failed:\n{traceback.format_exc()}"
        return self._abort(session, position, details, "the analysis failed", refusal=True)

    def _abort(
        self, session: Session, position: int, reason: str, category: str = WITHHELD, refusal: bool = True
    ):
        """End the session: the analyst, the session record and the log get ``category``; the exact
        ``reason``, which may state figures from the confidential data, goes to the confidential
        diagnostics only."""
        public = f"analysis {position}: {category}"
        self._record_abort(session, public, refusal)
        log.info("session %s aborted at analysis %d: %s", session.session_id, position, category)
        self.diagnostics.write(f"session {session.session_id} aborted at analysis {position}: {reason}")
        return controller_pb2.NextResponse(position=position, last=True, abort_reason=public)

    def _record_abort(self, session: Session, public: str, refusal: bool) -> None:
        state = self._sessions.abort(session, public, refusal, self._policy.refusal_budget)
        if refusal and state.suspended:
            log.warning(
                "person %r is suspended after %d withheld analyses (petlab-server persons lift to resume)",
                session.person,
                state.refusals,
            )
