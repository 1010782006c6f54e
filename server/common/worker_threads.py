"""Synchronous servicers on the event loop: each call's work runs on a bounded pool of threads.

The analysis controller and the Paillier baseline are written as synchronous code (the
controller's decisions hold a lock over the release history, the baseline does modular
arithmetic). :func:`threaded` gives such a servicer's unary methods to the ``grpc.aio`` server as
coroutines that run the method on ``pool`` once the request has arrived: a call waiting for its
peer (its request or the reading of its reply) holds no thread, and a call doing work holds one of
the pool's, so the pool's size bounds the room's CPU work; calls are admitted to the pool by fair
shares between callers (``server.common.fair_share``), so one caller's flood waits its turns
instead of filling the pool's queue. The method sees a
:class:`ThreadContext`: what it reads of the call (peer, metadata, time remaining, whether it is
still active) and an ``abort`` that raises :class:`~petlab.server.common.rpc_errors.CallRefused`,
which the server's boundary interceptor answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, NoReturn

import grpc

from petlab.server.common.call_log import logged_unary
from petlab.server.common.fair_share import FairSlots, caller_key
from petlab.server.common.rpc_errors import CallRefused


class ThreadContext:
    """The synchronous view of an asyncio call's context that a method in a worker thread sees."""

    def __init__(self, context: grpc.aio.ServicerContext):
        self._peer = context.peer()
        identities = context.peer_identities()
        self._identities = None if identities is None else tuple(identities)
        self._metadata = tuple(context.invocation_metadata() or ())
        remaining = context.time_remaining()
        loop = asyncio.get_running_loop()
        self._deadline = None if remaining is None else loop.time() + remaining
        self._clock = loop.time
        self._trailing: tuple[tuple[str, str], ...] = ()
        self.ended = threading.Event()

    def peer(self) -> str:
        return self._peer

    def peer_identities(self) -> Sequence[bytes] | None:
        return self._identities

    def invocation_metadata(self) -> tuple:
        return self._metadata

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - self._clock(), 0.0)

    def is_active(self) -> bool:
        return not self.ended.is_set()

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._trailing = tuple(metadata)

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise CallRefused(code, details, self._trailing)


async def run_in(pool: Executor, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` on ``pool``, awaited from the loop."""
    return await asyncio.get_running_loop().run_in_executor(pool, function, *args)


def threaded(
    servicer: Any, methods: Sequence[str], pool: Executor, slots: FairSlots, cheap: Sequence[str] = ()
) -> Any:
    """An object whose ``methods`` are coroutines running ``servicer``'s synchronous unary
    methods of the same names on ``pool``, each call admitted by ``slots`` (fair shares between
    callers, so the pool only ever has admitted work; module docstring) except the ``cheap`` ones
    (a lookup of public facts, microseconds of work), which are never refused."""

    def make(name: str) -> Callable[..., Any]:
        method = getattr(servicer, name)

        async def call(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            view = ThreadContext(context)
            # typeshed declares grpc.aio's done callback as a class, not a callable protocol
            context.add_done_callback(lambda _: view.ended.set())  # type: ignore[arg-type]
            if name in cheap:
                return await run_in(pool, method, request, view)
            async with slots.held(caller_key(context)):
                return await run_in(pool, method, request, view)

        call.__name__ = name
        return logged_unary(call)

    return type(f"Threaded{type(servicer).__name__}", (), {name: make(name) for name in methods})()
