"""Per-call latency and bytes, measured by one client interceptor (the device's ``--stats``, the
Paillier baseline and the experiments all read it).

:class:`CallRecorder` sees every unary and client-streaming call of the channel it intercepts
(``grpc.intercept_channel``) and, when the call succeeds, appends a :class:`CallStats`: the
method's name, the seconds from the call to its reply, and the serialized sizes of the request
message(s) and of the reply. A protobuf message's ``ByteSize()`` is the length of the payload gRPC
transmits for it (HTTP/2 framing and headers excluded); ``tests/experiments/test_experiments.py`` checks it
against ``SerializeToString()``. A failed call is not recorded (its error is the caller's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc


@dataclass
class CallStats:
    method: str
    seconds: float
    bytes_sent: int
    bytes_received: int


class CallRecorder(grpc.UnaryUnaryClientInterceptor, grpc.StreamUnaryClientInterceptor):
    """Appends a :class:`CallStats` to ``calls`` for every successful call."""

    def __init__(self, calls: list[CallStats] | None = None):
        self.calls: list[CallStats] = [] if calls is None else calls
        self._lock = threading.Lock()

    def totals(self) -> tuple[int, int]:
        """Bytes sent and received by the calls recorded so far."""
        with self._lock:
            return sum(c.bytes_sent for c in self.calls), sum(c.bytes_received for c in self.calls)

    def _record(
        self, details: grpc.ClientCallDetails, sent: Callable[[], int], outcome, started: float
    ) -> None:
        method = details.method if isinstance(details.method, str) else details.method.decode()

        def done(call) -> None:
            if call.exception() is None:
                seconds = time.perf_counter() - started
                stats = CallStats(method.rsplit("/", 1)[-1], seconds, sent(), call.result().ByteSize())
                with self._lock:
                    self.calls.append(stats)

        outcome.add_done_callback(done)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        started = time.perf_counter()
        outcome = continuation(client_call_details, request)
        self._record(client_call_details, lambda: request.ByteSize(), outcome, started)
        return outcome

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        sent = 0

        def counted() -> Iterator:
            nonlocal sent
            for message in request_iterator:
                sent += message.ByteSize()
                yield message

        started = time.perf_counter()
        outcome = continuation(client_call_details, counted())
        self._record(client_call_details, lambda: sent, outcome, started)
        return outcome
