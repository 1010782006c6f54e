"""Admission limits that keep one caller from taking what others need, on the event loop.

Every call's waiting is a suspended coroutine (``grpc.aio``), so a caller that stalls costs no
thread; what is scarce is the work: evaluations and key checks run in a bounded pool of
``--workers`` threads, and uploads buffer keys in memory. These bound it:

* :class:`Slots`: fail-fast admission. A call that needs a slot (a key upload) and finds none free
  is answered at once with RESOURCE_EXHAUSTED, a retry hint in the message and in the
  ``retry-after-s`` trailing metadata, which the clients follow.
* :class:`OwnerSlots`: the same, per identified owner (``owner_upload_slots``,
  ``owner_evaluation_slots``), taken before the shared slots: one owner cannot hold every shared
  slot, so its exhausted quota never refuses another owner.
* ``server.common.fair_share.FairSlots``: evaluations, shared fairly between callers, one query
  at a time (a batch of 64 queries takes 64 turns).
* :class:`UploadPace`: an upload whose first chunk has not arrived within ``first_chunk_seconds``,
  or that after ``grace_seconds`` has averaged fewer than ``min_bytes_per_second``, ends with
  DEADLINE_EXCEEDED; nothing is stored. Each chunk is awaited with that bound, so a peer that
  stops sending is dropped, never waited for.

Slots are counted on the event loop's thread only (no lock).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from petlab.server.common.rpc_errors import RETRY_AFTER_SECONDS, TimedOut, refuse_busy

__all__ = ["RETRY_AFTER_SECONDS", "OwnerSlots", "ServiceLimits", "Slots", "UploadPace", "refuse_busy"]


@dataclass(frozen=True)
class ServiceLimits:
    upload_slots: int = 2
    evaluation_slots: int = 3  # evaluations admitted at once (each runs on a worker thread)
    first_chunk_seconds: float = 10.0
    grace_seconds: float = 10.0
    min_bytes_per_second: float = 256 * 1024
    owner_upload_slots: int = 1  # per identified owner (tokens or client certificates)
    owner_evaluation_slots: int = 1
    # callers under their fair share waiting for an evaluation slot (server.common.fair_share);
    # a waiting call holds a suspended coroutine and its request, no thread; 0: nobody waits
    evaluation_waiting: int = 32
    evaluation_wait_seconds: float = 30.0

    def check(self, workers: int) -> None:
        if (
            min(
                self.upload_slots, self.evaluation_slots, self.owner_upload_slots, self.owner_evaluation_slots
            )
            < 1
        ):
            raise ValueError("upload and evaluation slots (shared and per owner) must be at least 1")
        if self.evaluation_waiting < 0 or self.evaluation_wait_seconds <= 0:
            raise ValueError("--evaluation-waiting must be at least 0 and --evaluation-wait-seconds positive")
        if self.evaluation_slots > workers:
            raise ValueError(
                f"--evaluation-slots ({self.evaluation_slots}) cannot exceed the {workers} worker "
                "threads that run them (--workers)"
            )
        if self.first_chunk_seconds <= 0 or self.grace_seconds < 0 or self.min_bytes_per_second < 0:
            raise ValueError("upload time limits must be positive")


class Slots:
    """At most ``count`` holders at a time; nobody waits for a slot."""

    def __init__(self, count: int, what: str):
        self.count, self.what = count, what
        self._held = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        if self._held >= self.count:
            refuse_busy(f"the server is busy with other {self.what}; retry in {RETRY_AFTER_SECONDS} seconds")
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1


class OwnerSlots:
    """At most ``count`` holders per owner at a time; nobody waits. ``limited=False`` turns it
    off (anonymous callers: the shared slots and fair shares apply)."""

    def __init__(self, count: int, what: str, limited: bool = True):
        self._count, self.what, self._limited = count, what, limited
        self._held: Counter[str] = Counter()

    @contextmanager
    def held(self, owner: str) -> Iterator[None]:
        if not self._limited:
            yield
            return
        if self._held[owner] >= self._count:
            refuse_busy(
                f"you already have {self._count} {self.what} running, your limit; retry when one ends"
            )
        self._held[owner] += 1
        try:
            yield
        finally:
            self._held[owner] -= 1
            if not self._held[owner]:
                del self._held[owner]


class UploadPace:
    """Reads an upload's messages, each within the time its pace allows (module docstring)."""

    def __init__(self, limits: ServiceLimits, clock: Callable[[], float] = time.monotonic):
        self._limits, self._clock = limits, clock
        self._started = clock()
        self.bytes = 0
        self.chunks = 0

    def allowed_wait(self) -> float:
        """How long the next message may take: until the first-chunk limit, or until the average
        rate falls below the minimum (at least a moment, so a fast peer is never cut mid-read)."""
        limits = self._limits
        elapsed = self._clock() - self._started
        if self.chunks == 0:
            return max(limits.first_chunk_seconds - elapsed, 0.0)
        if limits.min_bytes_per_second <= 0:
            return limits.first_chunk_seconds
        deadline = limits.grace_seconds + self.bytes / limits.min_bytes_per_second
        return max(deadline - elapsed, 0.0)

    def reason(self) -> str:
        if self.chunks == 0:
            return f"no key chunk arrived within {self._limits.first_chunk_seconds:g} s"
        return f"the upload is slower than {self._limits.min_bytes_per_second:g} bytes per second"

    async def messages(self, requests: AsyncIterator[Any], size: Callable[[Any], int]) -> AsyncIterator[Any]:
        """``requests``, each awaited within :meth:`allowed_wait`; DEADLINE_EXCEEDED otherwise."""
        iterator = aiter(requests)
        while True:
            try:
                message = await asyncio.wait_for(anext(iterator), self.allowed_wait())
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise TimedOut(self.reason()) from None
            self.chunks += 1
            self.bytes += size(message)
            yield message
