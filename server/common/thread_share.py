"""The server's threads, shared so that k-NN work cannot starve the analysis controller, and a
time limit on every call (issue 15, item 3).

gRPC's Python server runs every call on one fixed pool, and a call cannot pick its pool. So:

* :class:`ThreadShare` caps the calls of the *limited* services (k-NN and the Paillier baseline) at
  ``limit`` running at once. One more waits at most ``wait_seconds`` (a quarter second: bursts of
  cheap calls are served, not refused) and is then answered RESOURCE_EXHAUSTED with the
  ``retry-after-s`` hint, leaving its thread. The remaining ``workers - limit`` threads are the
  controller's own (and health's): however many k-NN calls arrive, they find a thread within that
  wait.
* :class:`CallTimeLimit` gives every unary and client-streaming call a server-side time limit: when
  it passes, the call is cancelled (the caller sees CANCELLED; evaluations check between queries
  and before they start, and stop). Response streams (health ``Watch``, reflection) have their own
  budget and time limits (``server.common.streams``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

import grpc

from petlab.server.common.admission import RETRY_AFTER_SECONDS, refuse_busy
from petlab.server.common.handlers import UNARY_RESPONSES, Behavior, rewrap
from petlab.server.common.late_calls import LateCalls

log = logging.getLogger(__name__)


def _rewrap(handler, wrap: Callable[[Behavior], Behavior]):
    """``handler`` with its unary-response behaviour wrapped (response streams, which
    ``server.common.streams`` bounds, left as they are)."""
    return rewrap(handler, wrap, UNARY_RESPONSES)


def _service(method: str) -> str:
    return method.lstrip("/").split("/", 1)[0]


class ThreadShare(grpc.ServerInterceptor):
    """At most ``limit`` calls of ``services`` at once (see the module docstring)."""

    def __init__(self, services: Iterable[str], limit: int, wait_seconds: float = 0.25):
        if limit < 1:
            raise ValueError("the k-NN share of the thread pool must be at least one thread")
        self._services, self._wait = frozenset(services), wait_seconds
        self._semaphore = threading.BoundedSemaphore(limit)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if _service(handler_call_details.method) not in self._services:
            return handler
        return _rewrap(handler, self._bounded)

    def _bounded(self, behavior: Behavior) -> Behavior:
        def bounded(request, context):
            if not self._semaphore.acquire(timeout=self._wait):
                refuse_busy(
                    context,
                    "the server is busy with other encrypted k-NN calls; "
                    f"retry in {RETRY_AFTER_SECONDS} seconds",
                )
            try:
                return behavior(request, context)
            finally:
                self._semaphore.release()

        return bounded


class CallTimeLimit(grpc.ServerInterceptor):
    """Cancel any unary-response call still running after ``seconds`` (one watcher thread for all
    calls, not a timer thread per call). :meth:`start` and :meth:`finish` time any other wait the
    same way (``server.common.request_arrival``); ``overrun`` says what the log reports."""

    def __init__(
        self,
        seconds: float,
        clock: Callable[[], float] = time.monotonic,
        overrun: str = "ran past the server's {seconds:g} s limit",
    ):
        if seconds <= 0:
            raise ValueError("the per-call time limit must be positive")
        self._seconds, self._overrun = seconds, overrun
        self._running: LateCalls[tuple[float, str, grpc.ServicerContext]] = LateCalls(
            "petlab-call-time-limit", _end_of, self._cancel, clock
        )

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        return _rewrap(continuation(handler_call_details), lambda behavior: self._limited(behavior, method))

    def start(self, method: str, context: grpc.ServicerContext) -> int:
        """The call's clock starts: it is cancelled ``seconds`` from now unless :meth:`finish`."""
        return self._running.add((self._running.clock() + self._seconds, method, context))

    def finish(self, call: int) -> None:
        self._running.remove(call)

    def _limited(self, behavior: Behavior, method: str) -> Behavior:
        def limited(request, context):
            call = self.start(method, context)
            try:
                return behavior(request, context)
            finally:
                self.finish(call)

        return limited

    def _cancel(self, call: tuple[float, str, grpc.ServicerContext]) -> None:
        _, method, context = call
        log.warning("%s %s: cancelled", method, self._overrun.format(seconds=self._seconds))
        context.cancel()


def _end_of(call: tuple[float, str, grpc.ServicerContext]) -> float:
    return call[0]
