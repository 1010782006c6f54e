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
    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        decode = _tolerant(handler.request_deserializer)
        encode = handler.response_serializer
        if handler.unary_unary is not None:
            unary_unary = handler.unary_unary
            return grpc.unary_unary_rpc_method_handler(
                lambda request, context: unary_unary(_checked(request, context), context), decode, encode
            )
        if handler.unary_stream is not None:
            unary_stream = handler.unary_stream
            return grpc.unary_stream_rpc_method_handler(
                lambda request, context: unary_stream(_checked(request, context), context), decode, encode
            )
        if handler.stream_unary is not None:
            stream_unary = handler.stream_unary
            return grpc.stream_unary_rpc_method_handler(
                lambda requests, context: stream_unary(_checked_stream(requests, context), context),
                decode,
                encode,
            )
        stream_stream = handler.stream_stream
        return grpc.stream_stream_rpc_method_handler(
            lambda requests, context: stream_stream(_checked_stream(requests, context), context),
            decode,
            encode,
        )
