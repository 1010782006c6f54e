"""One thread that ends calls whose time is up, never holding its lock while it ends them.

Three bounds of the server share this loop: a call's time limit (``server.common.thread_share``),
one send of a response stream (``server.common.send_deadline``) and a stream's lifetime and idle
limit (``server.common.streams``). Each keeps its calls here, one entry per call (or per send),
with the moment the entry is late; the thread sleeps until the earliest such moment (or a change),
takes every late entry out of the table under the lock, and calls ``on_late`` for each after
releasing it, so a ``context.cancel()`` (which may wait on grpc) never blocks anyone who adds or
removes an entry.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

Entry = TypeVar("Entry")

SHORTEST_SLEEP = 0.05  # seconds: a late entry is ended within this of its time, at worst


class LateCalls(Generic[Entry]):
    """The table of entries and its thread (module docstring). ``due(entry)`` is the clock time at
    which ``entry`` is late (it may change while the entry is in the table: call :meth:`changed`);
    ``on_late(entry)`` runs in the thread, without the lock, once the entry has left the table.

    ``lock`` guards ``entries``; a caller may hold it to read or edit the table in one step (then
    :meth:`changed` after an edit that brings a moment forward)."""

    def __init__(
        self,
        name: str,
        due: Callable[[Entry], float],
        on_late: Callable[[Entry], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self._due, self._on_late, self.clock = due, on_late, clock
        self.entries: dict[int, Entry] = {}
        self.lock = threading.Condition()  # re-entrant: add() may be called holding it
        self._ids = itertools.count()
        self._stopped = False
        threading.Thread(target=self._watch, name=name, daemon=True).start()

    def add(self, entry: Entry) -> int:
        """Keep ``entry`` until it is late or :meth:`remove`d; its id."""
        entry_id = next(self._ids)
        with self.lock:
            self.entries[entry_id] = entry
            self.lock.notify()
        return entry_id

    def remove(self, entry_id: int) -> Entry | None:
        """Take an entry out (the call ended in time); None if it was late and has gone already."""
        with self.lock:
            return self.entries.pop(entry_id, None)

    def changed(self) -> None:
        """An entry's moment moved: the thread looks again."""
        with self.lock:
            self.lock.notify()

    def close(self) -> None:
        """The thread ends; entries still in the table are left alone."""
        with self.lock:
            self._stopped = True
            self.lock.notify()

    def _watch(self) -> None:
        while True:
            with self.lock:
                if self._stopped:
                    return
                now = self.clock()
                late_ids = [entry_id for entry_id, entry in self.entries.items() if self._due(entry) <= now]
                late = [self.entries.pop(entry_id) for entry_id in late_ids]
                if not late:
                    dues = [self._due(entry) for entry in self.entries.values()]
                    self.lock.wait(timeout=max(min(dues) - now, SHORTEST_SLEEP) if dues else None)
                    continue
            for entry in late:
                self._on_late(entry)
