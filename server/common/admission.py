"""Server-side limits that keep one caller from stalling everyone (issue 15, item 3).

gRPC's synchronous Python server runs every call on one thread of a fixed pool. Eight key uploads
that never send a byte used to hold all eight threads, so every other call, the analysis
controller's included, waited for its deadline. Two mechanisms bound that:

* :class:`Slots`: fail-fast admission. A call that needs a slot (a key upload, an evaluation) and
  finds none free is answered at once with RESOURCE_EXHAUSTED, a retry hint in the message and
  in the ``retry-after-s`` trailing metadata, instead of queueing on a pool thread. Uploads and
  evaluations together hold at most ``upload_slots + evaluation_slots`` threads, fewer than the
  pool (checked in :meth:`ServiceLimits.check`), so cheap calls always find a thread.
* :class:`OwnerSlots`: the same, per identified owner (``owner_upload_slots``,
  ``owner_evaluation_slots``), taken before the shared slots: one owner cannot hold every shared
  slot, so its exhausted quota never refuses another owner.
* :class:`server.common.fair_share.FairSlots`: evaluation slots, shared fairly between callers;
  ``evaluation_waiting`` of the ``evaluation_slots`` threads are a room where a caller under its
  share waits (boundedly) for one of the others.
* :class:`UploadWatchdog`: a timer per upload that cancels the call when the first chunk has not
  arrived within ``first_chunk_seconds``, or when, after ``grace_seconds``, fewer than
  ``min_bytes_per_second`` on average have arrived. The cancelled upload ends as any broken
  upload does: its staging file is removed and nothing is stored.

Evaluations cannot be interrupted once concrete runs them; each is bounded by the caller's
deadline before it starts (``ClassifyBatch`` checks it between queries and releases the model
between them), and by the slot count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn

import grpc

from petlab.server.common.rpc_errors import abort

RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class ServiceLimits:
    upload_slots: int = 2
    evaluation_slots: int = 3  # threads: one running per model lock, the rest waiting briefly
    first_chunk_seconds: float = 10.0
    grace_seconds: float = 10.0
    min_bytes_per_second: float = 256 * 1024
    owner_upload_slots: int = 1  # per identified owner (tokens or client certificates)
    owner_evaluation_slots: int = 1
    # of evaluation_slots, places where a caller under its fair share waits for one of the others
    # (server.common.fair_share); 0: nobody waits
    evaluation_waiting: int = 1
    evaluation_wait_seconds: float = 30.0

    def check(self, workers: int) -> None:
        if (
            min(
                self.upload_slots, self.evaluation_slots, self.owner_upload_slots, self.owner_evaluation_slots
            )
            < 1
        ):
            raise ValueError("upload and evaluation slots (shared and per owner) must be at least 1")
        if not 0 <= self.evaluation_waiting < self.evaluation_slots or self.evaluation_wait_seconds <= 0:
            raise ValueError(
                "--evaluation-waiting must be at least 0 and fewer than --evaluation-slots, and "
                "--evaluation-wait-seconds positive"
            )
        if self.upload_slots + self.evaluation_slots >= workers:
            raise ValueError(
                f"uploads ({self.upload_slots}) and evaluations ({self.evaluation_slots}) must leave "
                f"some of the {workers} threads k-NN calls may use (--workers minus the threads kept "
                "for the controller and health checks) for other calls; raise --workers"
            )
        if self.first_chunk_seconds <= 0 or self.grace_seconds < 0 or self.min_bytes_per_second < 0:
            raise ValueError("upload time limits must be positive")


class Slots:
    """At most ``count`` holders at a time; nobody waits for a slot."""

    def __init__(self, count: int, what: str):
        self._semaphore = threading.BoundedSemaphore(count)
        self.what = what

    @contextmanager
    def held(self, context) -> Iterator[None]:
        if not self._semaphore.acquire(blocking=False):
            refuse_busy(
                context, f"the server is busy with other {self.what}; retry in {RETRY_AFTER_SECONDS} seconds"
            )
        try:
            yield
        finally:
            self._semaphore.release()


def refuse_busy(context: grpc.ServicerContext, message: str) -> NoReturn:
    """End the call RESOURCE_EXHAUSTED with a ``retry-after-s`` hint (every admission limit's
    answer: nobody waits)."""
    context.set_trailing_metadata((("retry-after-s", str(RETRY_AFTER_SECONDS)),))
    abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, message)


class OwnerSlots:
    """At most ``count`` holders per owner at a time; nobody waits. ``limited=False`` turns it
    off (anonymous callers are one shared pool, bounded by :class:`Slots` only)."""

    def __init__(self, count: int, what: str, limited: bool = True):
        self._count, self.what, self._limited = count, what, limited
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def held(self, owner: str, context) -> Iterator[None]:
        if not self._limited:
            yield
            return
        with self._lock:
            taken = self._held.get(owner, 0) < self._count
            if taken:
                self._held[owner] = self._held.get(owner, 0) + 1
        if not taken:
            refuse_busy(
                context,
                f"you already have {self._count} {self.what} running, your limit; retry when one ends",
            )
        try:
            yield
        finally:
            with self._lock:
                self._held[owner] -= 1
                if not self._held[owner]:
                    del self._held[owner]


class UploadWatchdog:
    """Cancels a streaming upload that is idle or too slow (see the module docstring)."""

    def __init__(self, context, limits: ServiceLimits, clock: Callable[[], float] = time.monotonic):
        self._context, self._limits, self._clock = context, limits, clock
        self._started = clock()
        self._bytes, self._chunks = 0, 0
        self._stop = threading.Event()
        self.reason = ""
        self._thread = threading.Thread(target=self._watch, name="petlab-upload-watchdog", daemon=True)

    def __enter__(self) -> UploadWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def finish(self) -> None:
        """The last chunk has arrived: stop watching (verification may take a while)."""
        self._stop.set()

    def received(self, size: int) -> None:
        self._chunks += 1
        self._bytes += size

    def _verdict(self) -> str:
        elapsed = self._clock() - self._started
        limits = self._limits
        if self._chunks == 0 and elapsed > limits.first_chunk_seconds:
            return f"no key chunk arrived within {limits.first_chunk_seconds:g} s"
        if elapsed > limits.grace_seconds and self._bytes < limits.min_bytes_per_second * (
            elapsed - limits.grace_seconds
        ):
            return f"the upload is slower than {limits.min_bytes_per_second:g} bytes per second"
        return ""

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            reason = self._verdict()
            if reason:
                self.reason = reason
                self._context.cancel()
                return
