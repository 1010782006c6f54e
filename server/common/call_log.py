"""One structured log line per RPC: method, model, bytes in and out, latency, status."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable

import grpc

log = logging.getLogger("petlab.calls")


def _size(message) -> int:
    return message.ByteSize() if hasattr(message, "ByteSize") else 0


def logged_unary(method: Callable) -> Callable:
    """Wrap a unary servicer method (self, request, context)."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        started, response, status = time.perf_counter(), None, "OK"
        try:
            response = method(self, request, context)
            return response
        except Exception:
            code = context.code() if hasattr(context, "code") else None
            status = code.name if isinstance(code, grpc.StatusCode) else "INTERNAL"
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


def logged_stream_in(method: Callable) -> Callable:
    """Wrap a client-streaming method (self, request_iterator, context); counts streamed bytes."""

    @functools.wraps(method)
    def wrapper(self, request_iterator, context):
        started, response, status = time.perf_counter(), None, "OK"
        counter = {"bytes": 0, "model": ""}

        def counted():
            for message in request_iterator:
                counter["bytes"] += _size(message)
                counter["model"] = counter["model"] or getattr(message, "model", "")
                yield message

        try:
            response = method(self, counted(), context)
            return response
        except Exception:
            status = _failure_status(context)
            raise
        finally:
            _emit(method.__name__, counter["model"], counter["bytes"], _size(response), started, status)

    return wrapper


def _failure_status(context) -> str:
    """The status a failed call ends with: the one set by ``context.abort``, else INTERNAL."""
    code = context.code() if hasattr(context, "code") else None
    return code.name if isinstance(code, grpc.StatusCode) else "INTERNAL"


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
