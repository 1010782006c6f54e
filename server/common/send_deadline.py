"""A bound on one send of every response stream: a peer that does not take a message is dropped,
never waited for (issue 29).

grpc's synchronous server sends a streamed response from the thread that produced it and waits for
the send to complete; a peer that announces a zero HTTP/2 window, or stops reading once the window
is spent, makes that wait last for as long as the connection does. :class:`SendDeadline` wraps every
method whose responses stream (health ``Watch``, reflection's ``ServerReflectionInfo``): from the
moment a response is handed to grpc until grpc asks for the next one (which it does once the send
completed) the stream is *sending*; a stream still sending ``send_seconds`` later is cancelled
(``context.cancel()``), which ends the send and frees its thread. One thread serves every stream
(``server.common.late_calls``); its lock guards a dict and is never held across a send or a cancel.

Unary responses are not concerned: grpc starts their send with the status and does not wait for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc

from petlab.server.common.handlers import RESPONSE_STREAMS, Behavior, is_non_blocking, rewrap
from petlab.server.common.late_calls import LateCalls

log = logging.getLogger(__name__)

SEND_SECONDS = 5.0


@dataclass
class _Send:
    method: str
    context: grpc.ServicerContext
    deadline: float


class SendDeadline(grpc.ServerInterceptor):
    """Cancel a response stream whose send has not completed within ``send_seconds``."""

    def __init__(self, send_seconds: float = SEND_SECONDS, clock: Callable[[], float] = time.monotonic):
        if send_seconds <= 0:
            raise ValueError("--send-seconds must be positive")
        self.send_seconds = send_seconds
        self._sending = LateCalls("petlab-send-deadline", _due, self._cancel, clock)
        self.cancelled = 0  # streams cancelled for a late send (for logs and tests)

    def close(self) -> None:
        self._sending.close()

    def sending(self) -> int:
        """Sends in progress now."""
        with self._sending.lock:
            return len(self._sending.entries)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or not handler.response_streaming:
            return handler
        method = handler_call_details.method
        return rewrap(handler, lambda behavior: self._bounded(behavior, method), RESPONSE_STREAMS)

    def _bounded(self, behavior: Behavior, method: str) -> Behavior:
        if is_non_blocking(behavior):

            def non_blocking(request, context, send_response=None):
                def bounded_send(response):
                    if response is None:  # the status: grpc does not wait for it
                        return send_response(response)
                    send = self._start(method, context)
                    try:
                        return send_response(response)
                    finally:
                        self._end(send)

                return behavior(request, context, bounded_send)

            return non_blocking

        def blocking(request, context, *callback):
            return self._responses(behavior(request, context, *callback), method, context)

        return blocking

    def _responses(self, responses: Iterator | None, method: str, context) -> Iterator:
        if responses is None:
            return
        for response in responses:
            send = self._start(method, context)
            try:
                yield response  # grpc sends it, then asks for the next one
            finally:
                self._end(send)

    def _start(self, method: str, context) -> int:
        return self._sending.add(_Send(method, context, self._sending.clock() + self.send_seconds))

    def _end(self, send_id: int) -> None:
        self._sending.remove(send_id)

    def _cancel(self, send: _Send) -> None:
        self.cancelled += 1
        log.info("%s stream cancelled: a send not taken within %g s", send.method, self.send_seconds)
        send.context.cancel()


def _due(send: _Send) -> float:
    return send.deadline
