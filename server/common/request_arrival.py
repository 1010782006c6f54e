"""A call's request message must arrive within a time limit, and waiting for it holds no thread
that an admitted call needs (found by the red team, issue 23).

grpc's Python server reads a unary-request call's message in the thread the call will run on,
before any interceptor's behaviour starts (``_unary_request`` in ``grpc._server``), and waits for
it without a limit. A client that opens a call and never sends its message (a request stream
that yields nothing, into a unary method) held a pool thread for as long as it kept its connection:
8 such calls to health ``Check`` (no credentials needed; ``--call-seconds``, the thread share and
the stream budget all apply only once the behaviour runs) froze an 8-thread server: ``ListModels``,
the controller's ``Describe`` and health checks timed out. Health ``Watch`` was held the same way,
before its stream slot was even taken.

* :class:`RequestArrival`, the outermost interceptor, serves every unary-request method as a
  request-streaming one (the wire protocol is the same, clients see no difference), reads the one
  message itself, and cancels the call when none has come within ``seconds``; a call that ends
  without any message is INVALID_ARGUMENT. grpc's attributes of the behaviour are kept
  (``server.common.handlers``): ``Watch`` stays non-blocking once its request is in.
* The server's pool has a thread for every call it admits (``--max-concurrent-rpcs``;
  ``server.app``), so calls waiting for their message take admission slots, for at most
  ``seconds``, and never the threads of admitted calls.

Limit: a client that keeps opening such calls holds admission slots like any flood of calls
(refused for everyone beyond ``--max-concurrent-rpcs``, ``RESOURCE_EXHAUSTED`` at once, no stall).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from petlab.server.common.handlers import Behavior, arity, keep_attributes
from petlab.server.common.rpc_errors import abort
from petlab.server.common.thread_share import CallTimeLimit

_STREAMED = {
    "unary_unary": grpc.stream_unary_rpc_method_handler,
    "unary_stream": grpc.stream_stream_rpc_method_handler,
}
_NOTHING = object()


class RequestArrival(grpc.ServerInterceptor):
    """Unary-request methods read their message here, within ``seconds`` (module docstring)."""

    def __init__(self, seconds: float = 10.0):
        self.seconds = seconds
        self._clock = CallTimeLimit(seconds, overrun="sent no request message within {seconds:g} s")

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_streaming:
            return handler
        shape, method = arity(handler), handler_call_details.method
        behavior = getattr(handler, shape)
        return _STREAMED[shape](
            keep_attributes(self._reading(behavior, method), behavior),
            handler.request_deserializer,
            handler.response_serializer,
        )

    def _reading(self, behavior: Behavior, method: str) -> Behavior:
        def reading(requests: Iterator[Any], context: grpc.ServicerContext, *callback):
            call = self._clock.start(method, context)
            try:
                request = next(requests, _NOTHING)  # grpc.RpcError once the clock cancels the call
            finally:
                self._clock.finish(call)
            if request is _NOTHING:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request message")
            return behavior(request, context, *callback)

        return reading
