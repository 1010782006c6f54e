"""Persistent controller state (SQLite under the data directory), so a restart loses nothing.

* sessions: the analyst's key and person, T_0, the last accepted trace, the position and the status
  (open, finished, aborted, closed, with the reason);
* releases: every functional the controller released (``release_history.Released``), to anyone,
  under the SHA-256 of the data file it was computed on, with the rules' digest, the person, the
  session and the position: the global history the audit replays at start. A changed data file
  starts a new, empty history (the old one stays, under its digest, never replayed against other
  records);
* persons: refusals, the last refusal, suspension (``people``); steps: when each person ran an
  analysis (the daily quota).

Each accepted step is one transaction: the session's new state, its released functionals and the
step are committed together or not at all; so is each refusal with the person's count.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from petlab.server.controller.people import DAY, PersonState, key_person
from petlab.server.controller.release_history import Released

OPEN, FINISHED, ABORTED, CLOSED = "open", "finished", "aborted", "closed"
_SESSIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS {name} (session_id TEXT PRIMARY KEY, analyst_key BLOB NOT NULL,"
    " first_trace BLOB NOT NULL, previous_trace BLOB NOT NULL, position INTEGER NOT NULL,"
    " status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', created REAL, updated REAL,"
    " UNIQUE (analyst_key, first_trace));"
)
_QUERY_SETS_TABLE = "CREATE TABLE IF NOT EXISTS query_sets (analyst_key BLOB NOT NULL, mask BLOB NOT NULL);"
_TABLES = """
CREATE TABLE IF NOT EXISTS releases (history TEXT NOT NULL, members BLOB NOT NULL, weight TEXT,
  definition TEXT NOT NULL, rules_sha256 TEXT NOT NULL, person TEXT NOT NULL, session_id TEXT NOT NULL,
  position INTEGER NOT NULL, created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS releases_by_history ON releases (history);
CREATE INDEX IF NOT EXISTS releases_by_person ON releases (person, created);
CREATE TABLE IF NOT EXISTS histories (data_sha256 TEXT PRIMARY KEY, n_records INTEGER NOT NULL,
  started REAL NOT NULL);
CREATE TABLE IF NOT EXISTS persons (person TEXT PRIMARY KEY, refusals INTEGER NOT NULL DEFAULT 0,
  last_refusal REAL, suspended INTEGER NOT NULL DEFAULT 0, note TEXT NOT NULL DEFAULT '', updated REAL);
CREATE TABLE IF NOT EXISTS steps (person TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS steps_by_person ON steps (person, at);
"""


@dataclass(frozen=True)
class Session:
    session_id: str
    analyst_key: bytes
    first_trace: bytes
    previous_trace: bytes
    position: int
    status: str
    reason: str
    person: str = ""


@dataclass(frozen=True)
class HistoryStart:
    """What opening the history of a data file found (the server logs it)."""

    releases: list[Released]
    new: bool  # no release was ever made on this data file
    other_histories: dict[str, int]  # data digests seen before, with their numbers of releases
    legacy_sets: int  # query sets stored per key, with no data file named: not used


_SESSION_COLUMNS = "session_id, analyst_key, first_trace, previous_trace, position, status, reason, person"


class SessionStore:
    def __init__(self, path: Path, clock: Callable[[], float] = time.time):
        """``clock``: the time stamps of sessions, releases and steps, and the per-day windows read
        from them (tests move it instead of sleeping)."""
        self.clock = clock
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._db = sqlite3.connect(path, check_same_thread=False)
        self.lock = threading.RLock()
        self._db.executescript(_SESSIONS_TABLE.format(name="sessions") + _QUERY_SETS_TABLE + _TABLES)
        self._migrate_global_first_trace()
        self._migrate_persons()
        self._db.commit()

    def _migrate_global_first_trace(self) -> None:
        """A sessions table that makes T_0 unique across all analysts (anyone who saw a victim's T_0
        could lock the victim out) is rebuilt with the per-analyst key, keeping every row, in one
        transaction."""
        row = self._db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sessions'"
        ).fetchone()
        if row is None or "UNIQUE (analyst_key, first_trace)" in row[0]:
            return
        with self._db:
            self._db.execute(_SESSIONS_TABLE.format(name="sessions_v2").rstrip(";"))
            self._db.execute("INSERT INTO sessions_v2 SELECT * FROM sessions")
            self._db.execute("DROP TABLE sessions")
            self._db.execute("ALTER TABLE sessions_v2 RENAME TO sessions")

    def _migrate_persons(self) -> None:
        """A sessions table without a person column: each key is taken as its own person."""
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(sessions)")]
        if "person" in columns:
            return
        with self._db:
            self._db.execute("ALTER TABLE sessions ADD COLUMN person TEXT NOT NULL DEFAULT ''")
            keys = self._db.execute("SELECT DISTINCT analyst_key FROM sessions").fetchall()
            self._db.executemany(
                "UPDATE sessions SET person = ? WHERE analyst_key = ?",
                [(key_person(bytes(key)), key) for (key,) in keys],
            )

    def open(self, analyst_key: bytes, first_trace: bytes, person: str | None = None) -> Session | None:
        """A new session, or None if this analyst key already used this T_0 (a replayed sequence).
        T_0 is unique per analyst key: someone else who saw a victim's T_0 and opens a session with
        it under their own key does not lock the victim out. A person has one open session: this
        one closes the person's earlier open sessions (``people``)."""
        person = person or key_person(analyst_key)
        session_id = secrets.token_hex(16)
        now = self.clock()
        with self.lock:
            try:
                with self._db:
                    self._db.execute(
                        "INSERT INTO sessions (session_id, analyst_key, first_trace, previous_trace,"
                        " position, status, reason, created, updated, person)"
                        " VALUES (?, ?, ?, ?, 0, ?, '', ?, ?, ?)",
                        (session_id, analyst_key, first_trace, first_trace, OPEN, now, now, person),
                    )
                    self._close_open(
                        person, "closed: the same person opened a newer session", now, session_id
                    )
            except sqlite3.IntegrityError:
                return None
        return self.get(session_id)

    def get(self, session_id: str) -> Session | None:
        with self.lock:
            row = self._db.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return Session(*row) if row else None

    def advance(
        self,
        session: Session,
        trace: bytes,
        finished: bool,
        history: str,
        rules_sha256: str,
        rows: list[Released],
    ) -> None:
        """Accept a step: the session moves on, and its released functionals join ``history``."""
        now = self.clock()
        with self.lock, self._db:
            self._db.execute(
                "UPDATE sessions SET previous_trace = ?, position = position + 1, status = ?, updated = ? "
                "WHERE session_id = ? AND status = ?",
                (trace, FINISHED if finished else OPEN, now, session.session_id, OPEN),
            )
            self._db.executemany(
                "INSERT INTO releases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        history,
                        row.members,
                        row.weight,
                        row.definition,
                        rules_sha256,
                        session.person,
                        session.session_id,
                        session.position + 1,
                        now,
                    )
                    for row in rows
                ],
            )
            self._db.execute("INSERT INTO steps VALUES (?, ?)", (session.person, now))

    def abort(
        self, session: Session, reason: str, refusal: bool = False, refusal_budget: int = 0
    ) -> PersonState:
        """End the session. A ``refusal`` (an abort that depends on the data) is counted against the
        person, starts the cool-down, suspends the person at ``refusal_budget`` refusals, and closes
        every other open session of the person."""
        now = self.clock()
        with self.lock, self._db:
            self._db.execute(
                "UPDATE sessions SET status = ?, reason = ?, position = position + 1, "
                "updated = ? WHERE session_id = ?",
                (ABORTED, reason, now, session.session_id),
            )
            if refusal:
                self._db.execute("INSERT INTO steps VALUES (?, ?)", (session.person, now))
                self._db.execute(
                    "INSERT INTO persons (person, refusals, last_refusal, updated) VALUES (?, 1, ?, ?) "
                    "ON CONFLICT (person) DO UPDATE SET refusals = refusals + 1, last_refusal = ?,"
                    " updated = ?",
                    (session.person, now, now, now, now),
                )
                self._db.execute(
                    "UPDATE persons SET suspended = 1, note = ? WHERE person = ? AND refusals >= ?",
                    (f"{refusal_budget} refusals", session.person, max(refusal_budget, 1)),
                )
                self._close_open(session.person, "closed: an analysis of the same person was withheld", now)
        return self.person(session.person)

    def close_session(self, session: Session, reason: str) -> None:
        """End an open session without a step (the person may not go on: ``people``)."""
        with self.lock, self._db:
            self._db.execute(
                "UPDATE sessions SET status = ?, reason = ?, updated = ? WHERE session_id = ? AND status = ?",
                (CLOSED, reason, self.clock(), session.session_id, OPEN),
            )

    def _close_open(self, person: str, reason: str, now: float, keep: str = "") -> None:
        self._db.execute(
            "UPDATE sessions SET status = ?, reason = ?, updated = ? "
            "WHERE person = ? AND status = ? AND session_id != ?",
            (CLOSED, reason, now, person, OPEN, keep),
        )

    # ---------------------------------------------------------------- persons

    def person(self, person: str, now: float | None = None) -> PersonState:
        now = self.clock() if now is None else now
        with self.lock:
            row = self._db.execute(
                "SELECT refusals, last_refusal, suspended FROM persons WHERE person = ?", (person,)
            ).fetchone()
            (recent,) = self._db.execute(
                "SELECT COUNT(*) FROM steps WHERE person = ? AND at > ?", (person, now - DAY)
            ).fetchone()
        if row is None:
            return PersonState(person, analyses_last_day=int(recent))
        return PersonState(person, int(row[0]), row[1], bool(row[2]), int(recent))

    def rows_added(self, person: str, session_id: str, now: float | None = None) -> tuple[int, int]:
        """Released rows ``person`` added to the histories in ``session_id`` and in the last 24 hours
        (the caps of ``people.PersonPolicy``)."""
        now = self.clock() if now is None else now
        with self.lock:
            (in_session,) = self._db.execute(
                "SELECT COUNT(*) FROM releases WHERE person = ? AND session_id = ?", (person, session_id)
            ).fetchone()
            (in_day,) = self._db.execute(
                "SELECT COUNT(*) FROM releases WHERE person = ? AND created > ?", (person, now - DAY)
            ).fetchone()
        return int(in_session), int(in_day)

    def persons(self) -> list[tuple[PersonState, str]]:
        """Every person with a record (refusals or a suspension), with the note."""
        with self.lock:
            names = self._db.execute("SELECT person, note FROM persons ORDER BY person").fetchall()
        return [(self.person(name), note) for name, note in names]

    def set_suspended(self, person: str, suspended: bool, note: str) -> PersonState:
        """The data owner's decision: suspend a person, or lift a suspension (which also clears the
        refusal count, so the budget starts again). The server enforces it at the person's next call
        (and closes the open session then)."""
        now = self.clock()
        with self.lock, self._db:
            self._db.execute(
                "INSERT INTO persons (person, suspended, note, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (person) DO UPDATE SET suspended = ?, note = ?, updated = ?",
                (person, int(suspended), note, now, int(suspended), note, now),
            )
            if not suspended:
                self._db.execute("UPDATE persons SET refusals = 0 WHERE person = ?", (person,))
        return self.person(person)

    # ---------------------------------------------------------------- the release history

    def start_history(self, data_sha256: str, n_records: int) -> HistoryStart:
        """The releases made on this data file (its SHA-256, hex), and what else the database
        holds; registers the history if it is new."""
        with self.lock, self._db:
            known = self._db.execute(
                "SELECT n_records FROM histories WHERE data_sha256 = ?", (data_sha256,)
            ).fetchone()
            if known is not None and known[0] != n_records:
                raise ValueError("the release history of this data digest has another number of records")
            if known is None:
                self._db.execute(
                    "INSERT INTO histories VALUES (?, ?, ?)", (data_sha256, n_records, self.clock())
                )
            rows = self._db.execute(
                "SELECT members, weight, definition FROM releases WHERE history = ? ORDER BY rowid",
                (data_sha256,),
            ).fetchall()
            others = dict(
                self._db.execute(
                    "SELECT history, COUNT(*) FROM releases WHERE history != ? GROUP BY history",
                    (data_sha256,),
                ).fetchall()
            )
            (legacy,) = self._db.execute("SELECT COUNT(*) FROM query_sets").fetchone()
        releases = [Released(bytes(members), weight, definition) for members, weight, definition in rows]
        return HistoryStart(releases, known is None, others, int(legacy))

    def close(self) -> None:
        with self.lock:
            self._db.close()
