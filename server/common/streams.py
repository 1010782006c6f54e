"""Response streams (health ``Watch``, reflection's ``ServerReflectionInfo``) cannot hold the
server (issues 23 and 29).

Measured before this module (a CLI server, 8 pool threads): 8 idle ``grpc.health.v1.Health/Watch``
streams, or 8 idle reflection streams, each from its own connection and with no credentials, held
every thread of the pool; ``ListModels``, the controller's ``Describe`` and health ``Check`` then
timed out until the streams were cancelled. :class:`StreamGuard` wraps every method whose responses
stream and guarantees:

* **a budget**: at most ``slots`` (``--stream-slots``, 8) streams are open at once, shared between
  callers (issue 29): when every slot is taken, a caller that holds at least two streams fewer
  than the caller holding the most gets a slot, and that caller's oldest stream is cancelled; any
  other caller is answered at once with RESOURCE_EXHAUSTED and the ``retry-after-s`` hint. Callers
  are counted as evaluations count them (``server.common.fair_share.caller_key``: a client
  certificate, else the remote address, else on loopback the connection; health needs no token,
  so tokens do not name stream callers). A slot is returned when the call ends, however it ends
  (``context.add_callback``), or when the guard cancels it;
* **threads of their own, bounded**: every stream whose behaviour blocks runs on the guard's pool of
  ``slots + SPARE_THREADS`` threads (grpc's ``experimental_thread_pool``), never on the server's
  pool, so streams never take a thread from the controller or the k-NN calls. Both streams the
  server has block: petlab's health ``Watch`` (``server.common.health``) waits in its thread for
  the next status change and sends from it, and reflection waits in its thread for the next
  request; so each open stream holds one guard thread for as long as it is open, and all streams
  together at most ``slots`` of them (the spare threads answer refusals). A non-blocking behaviour
  (``experimental_non_blocking``; none is served today) would hold its slot only;
* **time limits**: every stream is cancelled ``lifetime_seconds`` (``--stream-seconds``, 600 s)
  after it opened (a health client watches again), and a stream that also reads requests
  (reflection) when no request has come for ``idle_seconds`` (60 s). One watcher thread serves
  every stream and cancels outside its lock.

A stream whose peer does not take what is sent is not this module's: ``server.common.send_deadline``
cancels it ``--send-seconds`` after the send began, which returns its slot and its thread.

Limits: one caller can no longer keep another's streams out; a caller that opens streams from
many connections on loopback (or from many addresses) counts as many callers, and may cancel others'
streams down to an even split. Streams never keep unary calls out. ``--max-concurrent-rpcs`` counts the
blocking streams too: it must exceed ``slots`` plus the pool's threads (``ServerOptions`` checks).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from petlab.server.common.admission import RETRY_AFTER_SECONDS, refuse_busy
from petlab.server.common.fair_share import caller_key
from petlab.server.common.handlers import RESPONSE_STREAMS, Behavior, is_non_blocking, rewrap
from petlab.server.common.late_calls import LateCalls

log = logging.getLogger(__name__)

SPARE_THREADS = 2  # answer refusals while every slot holds a thread


@dataclass(frozen=True)
class StreamLimits:
    slots: int = 8
    idle_seconds: float = 60.0
    lifetime_seconds: float = 600.0

    def __post_init__(self) -> None:
        if self.slots < 1 or self.idle_seconds <= 0 or self.lifetime_seconds <= 0:
            raise ValueError("stream slots and stream time limits must be positive")


@dataclass
class _Stream:
    method: str
    context: grpc.ServicerContext
    caller: str  # whom the stream's slot counts against (server.common.fair_share.caller_key)
    ends: float  # the lifetime's end
    idle_seconds: float | None  # None: the stream reads no requests
    last_request: float


class StreamGuard(grpc.ServerInterceptor):
    """The budget, threads and time limits of response streams (module docstring)."""

    def __init__(self, limits: StreamLimits, clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.pool = ThreadPoolExecutor(limits.slots + SPARE_THREADS, thread_name_prefix="petlab-stream")
        self._open = LateCalls("petlab-stream-limits", _next_end, _cancel_late, clock)

    def open_streams(self) -> int:
        with self._open.lock:
            return len(self._open.entries)

    def close(self) -> None:
        self._open.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or not handler.response_streaming:
            return handler
        method, reads = handler_call_details.method, handler.request_streaming
        return rewrap(handler, lambda behavior: self._guarded(behavior, method, reads), RESPONSE_STREAMS)

    def _guarded(self, behavior: Behavior, method: str, reads_requests: bool) -> Behavior:
        non_blocking = is_non_blocking(behavior)

        def guarded(request, context, *callback):
            stream_id, victim = self._admit(method, context, reads_requests)
            released = threading.Event()

            def release() -> None:
                if not released.is_set():
                    released.set()
                    self._open.remove(stream_id)

            if not context.add_callback(release):  # the call has already ended
                release()
            if reads_requests:
                request = self._tracked(stream_id, request)
            if victim is None:
                return behavior(request, context, *callback)
            if not non_blocking:  # runs as long as the stream: make room first
                _cancel(victim)
                return behavior(request, context, *callback)
            try:  # a non-blocking behaviour returns once its first answer is handed over (grpc's
                # health servicer sent it holding a lock that a closing stream's callback waits
                # for on grpc's event thread, issue 29): the victim goes after that
                return behavior(request, context, *callback)
            finally:
                _cancel(victim)

        if not non_blocking and not hasattr(behavior, "experimental_thread_pool"):
            guarded.experimental_thread_pool = self.pool  # type: ignore[attr-defined]
        return guarded

    def _admit(self, method: str, context, reads_requests: bool) -> tuple[int, _Stream | None]:
        """A slot for this stream (its id). When none is free, the caller holding the most streams
        gives up its oldest (returned, for the caller to cancel) if it holds at least two more than
        this caller; else the call is refused."""
        caller, now = caller_key(context), self._open.clock()
        with self._open.lock:
            full = len(self._open.entries) >= self.limits.slots
            victim = self._make_room(caller) if full else None
            refused = full and victim is None
            stream_id = -1 if refused else self._open_stream(method, context, caller, now, reads_requests)
        if refused:
            refuse_busy(
                context,
                f"the server has {self.limits.slots} streams open, its limit, and you hold your "
                f"share of them; retry in {RETRY_AFTER_SECONDS} seconds",
            )
        return stream_id, victim

    def _make_room(self, caller: str) -> _Stream | None:
        """Under the table's lock, every slot taken: the oldest stream of the caller holding the most,
        removed, if that caller holds at least two more than ``caller``; else None."""
        held = Counter(stream.caller for stream in self._open.entries.values())
        hog, most = max(held.items(), key=lambda item: item[1])
        if most <= held[caller] + 1:
            return None
        streams = self._open.entries
        return streams.pop(min(sid for sid, stream in streams.items() if stream.caller == hog))

    def _open_stream(self, method: str, context, caller: str, now: float, reads_requests: bool) -> int:
        """Record a stream holding a slot (under the table's lock)."""
        return self._open.add(
            _Stream(
                method,
                context,
                caller,
                now + self.limits.lifetime_seconds,
                self.limits.idle_seconds if reads_requests else None,
                now,
            )
        )

    def _tracked(self, stream_id: int, requests: Iterator) -> Iterator:
        for request in requests:
            with self._open.lock:  # its idle limit starts again (a later moment: no need to wake)
                stream = self._open.entries.get(stream_id)
                if stream is not None:
                    stream.last_request = self._open.clock()
            yield request


def _cancel(victim: _Stream) -> None:
    log.info("%s stream cancelled: its caller held the most streams, another came", victim.method)
    victim.context.cancel()


def _cancel_late(stream: _Stream) -> None:
    """Called once ``stream`` is late (it has left the table: its slot is free)."""
    log.info("%s stream cancelled: %s", stream.method, _reason(stream))
    stream.context.cancel()


def _next_end(stream: _Stream) -> float:
    """When the stream is late: its lifetime's end, or earlier its idle limit's."""
    if stream.idle_seconds is None:
        return stream.ends
    return min(stream.ends, stream.last_request + stream.idle_seconds)


def _reason(stream: _Stream) -> str:
    """Which limit :func:`_next_end` reached."""
    if stream.idle_seconds is not None and stream.last_request + stream.idle_seconds < stream.ends:
        return f"no request for {stream.idle_seconds:g} s"
    return "open longer than the stream time limit"
