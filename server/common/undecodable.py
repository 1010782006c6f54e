"""Requests that do not decode: INVALID_ARGUMENT, not gRPC's INTERNAL.

gRPC's Python server answers a request whose bytes do not parse as the method's message (bad
wire format, a string field that is not UTF-8) with INTERNAL "Exception deserializing request!",
a status that says the server is broken. :class:`UndecodableRequests` wraps every method's
handler: the message is decoded by a tolerant deserializer, and a request (or any message of a
request stream) that does not decode ends the call with INVALID_ARGUMENT before the servicer sees
it. It applies to every service of the server (k-NN, Paillier, controller, health, reflection).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc

from petlab.server.common.handlers import Behavior, rewrap
from petlab.server.common.rpc_errors import abort

MESSAGE = "the request does not decode as this method's protocol buffer message"


class _Undecodable:
    """Stands for a message that did not decode."""


_UNDECODABLE = _Undecodable()


def _tolerant(decode: Callable[[bytes], object]) -> Callable[[bytes], object]:
    def deserialize(data: bytes) -> object:
        try:
            return decode(data)
        except Exception:  # protobuf's DecodeError, or any other refusal of the bytes
            return _UNDECODABLE

    return deserialize


def _checked(request, context: grpc.ServicerContext):
    if request is _UNDECODABLE:
        abort(context, grpc.StatusCode.INVALID_ARGUMENT, MESSAGE)
    return request


def _checked_stream(requests: Iterator, context: grpc.ServicerContext) -> Iterator:
    for request in requests:
        yield _checked(request, context)


class UndecodableRequests(grpc.ServerInterceptor):
    """Every method's requests decoded tolerantly, and checked before its behaviour sees them
    (grpc's attributes of the behaviour kept: ``server.common.handlers``)."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        streaming = handler.request_streaming

        def wrap(behavior: Behavior) -> Behavior:
            def checked(request, context, *callback):
                if streaming:
                    return behavior(_checked_stream(request, context), context, *callback)
                return behavior(_checked(request, context), context, *callback)

            return checked

        return rewrap(handler, wrap, request_deserializer=_tolerant(handler.request_deserializer))
