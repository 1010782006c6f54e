"""One structured log line per RPC: method, model, bytes in and out, latency, status."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from petlab.errors import PetlabError
from petlab.server.common.rpc_errors import status_of

log = logging.getLogger("petlab.calls")


def _size(message: Any) -> int:
    return message.ByteSize() if hasattr(message, "ByteSize") else 0


def _status(error: BaseException) -> str:
    if isinstance(error, PetlabError):
        return status_of(error).name
    if isinstance(error, TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED.name
    return "CANCELLED" if error.__class__.__name__ == "CancelledError" else "INTERNAL"


def logged_unary(method: Callable) -> Callable:
    """Wrap an async unary servicer method ``(self, request, context)``."""

    @functools.wraps(method)
    async def wrapper(self, request, context):
        started, response, status = time.perf_counter(), None, "OK"
        try:
            response = await method(self, request, context)
            return response
        except BaseException as error:
            status = _status(error)
            raise
        finally:
            _emit(
                method.__name__,
                getattr(request, "model", ""),
                _size(request),
                _size(response),
                started,
                status,
            )

    return wrapper


@dataclass
class _Streamed:
    """What a client stream has brought so far: its bytes, and the model its first message names."""

    bytes: int = 0
    model: str = ""


def logged_stream_in(method: Callable) -> Callable:
    """Wrap an async client-streaming method ``(self, request_iterator, context)``; counts the
    streamed bytes."""

    @functools.wraps(method)
    async def wrapper(self, request_iterator, context):
        started, response, status = time.perf_counter(), None, "OK"
        counter = _Streamed()

        async def counted():
            async for message in request_iterator:
                counter.bytes += _size(message)
                counter.model = counter.model or getattr(message, "model", "")
                yield message

        try:
            response = await method(self, counted(), context)
            return response
        except BaseException as error:
            status = _status(error)
            raise
        finally:
            _emit(method.__name__, counter.model, counter.bytes, _size(response), started, status)

    return wrapper


def _emit(method: str, model: str, bytes_in: int, bytes_out: int, started: float, status: str) -> None:
    log.info(
        json.dumps(
            {
                "method": method,
                "model": model,
                "bytes_in": bytes_in,
                "bytes_out": bytes_out,
                "latency_ms": round((time.perf_counter() - started) * 1000, 1),
                "status": status,
            }
        )
    )
