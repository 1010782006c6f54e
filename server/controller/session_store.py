"""Persistent controller sessions (SQLite under the data directory), so a restart loses nothing.

A session row holds the analyst's key, T_0, the last accepted trace, the position and the status
(open, finished, aborted, with the reason). Released query sets are kept per analyst key, so query-
set-size control spans all of an analyst's sessions. Each accepted step is one transaction: the new
state and its query sets are committed together or not at all.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

OPEN, FINISHED, ABORTED = "open", "finished", "aborted"
_SESSIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS {name} (session_id TEXT PRIMARY KEY, analyst_key BLOB NOT NULL,"
    " first_trace BLOB NOT NULL, previous_trace BLOB NOT NULL, position INTEGER NOT NULL,"
    " status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', created REAL, updated REAL,"
    " UNIQUE (analyst_key, first_trace));"
)
_QUERY_SETS_TABLE = "CREATE TABLE IF NOT EXISTS query_sets (analyst_key BLOB NOT NULL, mask BLOB NOT NULL);"


@dataclass(frozen=True)
class Session:
    session_id: str
    analyst_key: bytes
    first_trace: bytes
    previous_trace: bytes
    position: int
    status: str
    reason: str


class SessionStore:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._db = sqlite3.connect(path, check_same_thread=False)
        self.lock = threading.RLock()
        self._db.executescript(_SESSIONS_TABLE.format(name="sessions") + _QUERY_SETS_TABLE)
        self._migrate_global_first_trace()
        self._db.commit()

    def _migrate_global_first_trace(self) -> None:
        """Databases written before issue 14 made T_0 unique across all analysts (anyone who saw a
        victim's T_0 could lock the victim out). Rebuild such a table with the per-analyst key,
        keeping every row, in one transaction."""
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

    def open(self, analyst_key: bytes, first_trace: bytes) -> Session | None:
        """A new session, or None if this analyst already used this T_0 (a replayed sequence).
        T_0 is unique per analyst identity: someone else who saw a victim's T_0 and opens a
        session with it under their own key does not lock the victim out."""
        session_id = secrets.token_hex(16)
        now = time.time()
        with self.lock:
            try:
                self._db.execute(
                    "INSERT INTO sessions VALUES (?, ?, ?, ?, 0, ?, '', ?, ?)",
                    (session_id, analyst_key, first_trace, first_trace, OPEN, now, now),
                )
                self._db.commit()
            except sqlite3.IntegrityError:
                return None
        return self.get(session_id)

    def get(self, session_id: str) -> Session | None:
        with self.lock:
            row = self._db.execute(
                "SELECT session_id, analyst_key, first_trace, previous_trace, position, status, reason "
                "FROM sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return Session(*row) if row else None

    def advance(self, session: Session, trace: bytes, finished: bool, masks: list[np.ndarray]) -> None:
        with self.lock:
            self._db.execute(
                "UPDATE sessions SET previous_trace = ?, position = position + 1, status = ?, updated = ? "
                "WHERE session_id = ? AND status = ?",
                (trace, FINISHED if finished else OPEN, time.time(), session.session_id, OPEN),
            )
            self._db.executemany(
                "INSERT INTO query_sets VALUES (?, ?)", [(session.analyst_key, m.tobytes()) for m in masks]
            )
            self._db.commit()

    def abort(self, session: Session, reason: str) -> None:
        with self.lock:
            self._db.execute(
                "UPDATE sessions SET status = ?, reason = ?, position = position + 1, "
                "updated = ? WHERE session_id = ?",
                (ABORTED, reason, time.time(), session.session_id),
            )
            self._db.commit()

    def last_abort(self, analyst_key: bytes) -> float | None:
        """When this analyst's most recent session was aborted (seconds since the epoch), if ever."""
        with self.lock:
            row = self._db.execute(
                "SELECT MAX(updated) FROM sessions WHERE analyst_key = ? AND status = ?",
                (analyst_key, ABORTED),
            ).fetchone()
        return row[0] if row and row[0] is not None else None

    def released_sets(self, analyst_key: bytes) -> list[np.ndarray]:
        with self.lock:
            rows = self._db.execute("SELECT mask FROM query_sets WHERE analyst_key = ?", (analyst_key,))
            return [np.frombuffer(r[0], dtype=np.uint8) for r in rows]

    def close(self) -> None:
        with self.lock:
            self._db.close()
