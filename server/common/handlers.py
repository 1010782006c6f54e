"""Rebuilding a gRPC method handler around a wrapped behaviour without losing what grpc reads from
the behaviour itself.

grpc's Python server looks at two attributes of a handler's behaviour: ``experimental_non_blocking``
(the behaviour takes a third argument, ``send_response_callback``, returns at once and frees its
thread: grpc's own health servicer's ``Watch``) and ``experimental_thread_pool`` (the pool the call
runs on). A wrapper that drops them turns a non-blocking behaviour into a blocking generator that
holds a pool thread for as long as the stream stays open: 8 idle ``Watch`` streams froze an
8-thread server (issue 23). petlab's own health servicer (``server/common/health.py``) now blocks
in ``Watch`` on purpose (it sends from its own call, never under a lock: issue 29), so nothing the
server serves today is non-blocking; :func:`rewrap` still keeps both attributes, so a handler that
is stays so. Every interceptor of the server rebuilds handlers with :func:`rewrap`, whose wrappers
take ``(request, context, *callback)`` and pass ``*callback`` on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

Behavior = Callable[..., Any]
GRPC_ATTRIBUTES = ("experimental_non_blocking", "experimental_thread_pool")
ARITIES = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
RESPONSE_STREAMS = ("unary_stream", "stream_stream")
UNARY_RESPONSES = ("unary_unary", "stream_unary")

_FACTORIES = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}


def arity(handler: grpc.RpcMethodHandler) -> str:
    """Which of the four call shapes ``handler`` serves."""
    return next(name for name in ARITIES if getattr(handler, name) is not None)


def is_non_blocking(behavior: Behavior) -> bool:
    return bool(getattr(behavior, "experimental_non_blocking", False))


def keep_attributes(wrapper: Behavior, behavior: Behavior) -> Behavior:
    """``wrapper`` carrying ``behavior``'s grpc attributes (unless it set its own)."""
    for name in GRPC_ATTRIBUTES:
        if hasattr(behavior, name) and not hasattr(wrapper, name):
            setattr(wrapper, name, getattr(behavior, name))
    return wrapper


def rewrap(
    handler: grpc.RpcMethodHandler | None,
    wrap: Callable[[Behavior], Behavior],
    arities: tuple[str, ...] = ARITIES,
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler | None:
    """``handler`` with its behaviour replaced by ``wrap(behaviour)`` when its shape is one of
    ``arities`` (else unchanged), grpc's attributes kept, and the request deserializer replaced
    when one is given."""
    if handler is None:
        return None
    shape = arity(handler)
    if shape not in arities and request_deserializer is None:
        return handler
    behavior = getattr(handler, shape)
    wrapped = keep_attributes(wrap(behavior), behavior) if shape in arities else behavior
    return _FACTORIES[shape](
        wrapped, request_deserializer or handler.request_deserializer, handler.response_serializer
    )
