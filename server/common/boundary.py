"""The server's one interceptor: what every call of every service (k-NN, controller, Paillier,
health, reflection) goes through on the event loop.

* **Requests that do not decode** end with INVALID_ARGUMENT, not gRPC's INTERNAL ("Exception
  deserializing request!", a status that says the server is broken): the request deserializer is
  made tolerant and the handler refuses what it could not decode, before the servicer sees it.
* **Refusals**: a servicer raises :class:`~petlab.server.common.rpc_errors.CallRefused` (from the
  loop or from a worker thread), and the call ends here with its status, message and trailing
  metadata. Any other exception ends the call with INTERNAL and a message that names nothing (the
  traceback goes to the server's log).
* **A time limit for every call** (``call_seconds``): a call still running then is cancelled and
  ends with DEADLINE_EXCEEDED, whatever its peer does; a response stream's write that waits on a
  peer that does not read counts against it too.

grpc's own behaviours are coroutines or async generators here (``grpc.aio``), so a wrapper is one
too: a call that waits for its peer holds a suspended coroutine, never a thread.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from petlab.server.common.rpc_errors import CallRefused

log = logging.getLogger(__name__)

UNDECODABLE_MESSAGE = "the request does not decode as this method's protocol buffer message"
INTERNAL_MESSAGE = "internal error (the server's log has the details)"

_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


class _Undecodable:
    """Stands for a request message that did not decode."""


UNDECODABLE = _Undecodable()


def tolerant(decode: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if decode is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return decode(data)
        except Exception:  # protobuf's DecodeError, or any other refusal of the bytes
            return UNDECODABLE

    return deserialize


def checked(request: Any) -> Any:
    if request is UNDECODABLE:
        raise CallRefused(grpc.StatusCode.INVALID_ARGUMENT, UNDECODABLE_MESSAGE)
    return request


async def checked_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        yield checked(request)


async def end_call(context: grpc.aio.ServicerContext, error: BaseException, method: str) -> None:
    """End the call for ``error``: its status when it is a refusal, else INTERNAL."""
    if isinstance(error, CallRefused):
        if error.trailing:
            context.set_trailing_metadata(error.trailing)
        await context.abort(error.code, error.message)
    if isinstance(error, TimeoutError):
        await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the call exceeded the server's time limit")
    if isinstance(error, NotImplementedError):  # a generated servicer's method this server lacks
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this method is not implemented")
    log.error("%s failed", method, exc_info=error)
    await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)


class CallBoundary(grpc.aio.ServerInterceptor):
    """Decoding, refusals and the time limit of every call (module docstring)."""

    def __init__(self, call_seconds: float):
        if call_seconds <= 0:
            raise ValueError("--call-seconds must be positive")
        self.call_seconds = call_seconds

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        streaming_in, streaming_out = handler.request_streaming, handler.response_streaming
        behavior = {
            (False, False): handler.unary_unary,
            (False, True): handler.unary_stream,
            (True, False): handler.stream_unary,
            (True, True): handler.stream_stream,
        }[streaming_in, streaming_out]
        seconds = self.call_seconds

        def request_of(request: Any) -> Any:
            return checked_stream(request) if streaming_in else checked(request)

        if streaming_out:

            async def bounded_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                try:
                    async with asyncio.timeout(seconds):
                        result = behavior(request_of(request), context)
                        if inspect.isasyncgen(result):
                            async for response in result:
                                yield response
                        else:  # a coroutine that writes its responses itself
                            await result
                except grpc.aio.AbortError:
                    raise
                except Exception as error:
                    await end_call(context, error, method)

            wrapped: Callable[..., Any] = bounded_stream
        else:

            async def bounded(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    async with asyncio.timeout(seconds):
                        return await behavior(request_of(request), context)
                except grpc.aio.AbortError:
                    raise
                except Exception as error:
                    await end_call(context, error, method)

            wrapped = bounded
        return _FACTORIES[streaming_in, streaming_out](
            wrapped, tolerant(handler.request_deserializer), handler.response_serializer
        )
