"""The server's one interceptor: what every call of every service (k-NN, controller, Paillier,
health, reflection) goes through on the event loop.

* **Requests that do not decode** end with INVALID_ARGUMENT, not gRPC's INTERNAL ("Exception
  deserializing request!", a status that says the server is broken): the request deserializer is
  made tolerant and the handler refuses what it could not decode, before the servicer sees it.
* **Errors become statuses** (:func:`answer`): a servicer raises a domain error, a
  :class:`~petlab.errors.PetlabError` (from the loop or from a worker thread), and the call ends
  here with the status its class names (``grpc_status``), its message and any trailing metadata
  (``server.common.rpc_errors``). Any other exception, and a ``PetlabError`` whose status is
  INTERNAL, ends the call with INTERNAL and a message that names nothing (the traceback goes to
  the server's log).
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

from petlab.errors import PetlabError
from petlab.server.common.rpc_errors import CallRefused, InvalidRequest, status_of

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
        raise InvalidRequest(UNDECODABLE_MESSAGE)
    return request


async def checked_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        yield checked(request)


def answer(error: BaseException) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """The status, message and trailing metadata of a call that ``error`` ends (module docstring)."""
    if isinstance(error, PetlabError):
        code = status_of(error)
        if code is not grpc.StatusCode.INTERNAL:
            trailing = error.trailing if isinstance(error, CallRefused) else ()
            return code, str(error), trailing
    elif isinstance(error, TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED, "the call exceeded the server's time limit", ()
    elif isinstance(error, NotImplementedError):  # a generated servicer's method this server lacks
        return grpc.StatusCode.UNIMPLEMENTED, "this method is not implemented", ()
    return grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE, ()


async def end_call(context: grpc.aio.ServicerContext, error: BaseException, method: str) -> None:
    """End the call for ``error`` (:func:`answer`); an INTERNAL one's traceback goes to the log."""
    code, message, trailing = answer(error)
    if code is grpc.StatusCode.INTERNAL:
        log.error("%s failed", method, exc_info=error)
    if trailing:
        context.set_trailing_metadata(trailing)
    await context.abort(code, message)


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
