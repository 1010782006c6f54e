"""The event loop that in-process servers run on, for synchronous callers.

``petlab-server serve`` runs its server on the main thread's loop (``server.serve``). A server
started from synchronous code (tests, experiments, the library: ``server.app.start``) runs on one
process-wide loop in a daemon thread, :func:`shared_loop`, so that every such server of a process
shares one loop, as grpc's asyncio objects require (they may be used only on the thread that made
them); :meth:`LoopThread.run` hands it a coroutine and waits for its result, boundedly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import grpc

Result = TypeVar("Result")
_grpc_aio_kept = False


def keep_grpc_aio() -> None:
    """Initialise grpc's asyncio machinery once for the life of the process; called on the event
    loop that serves (grpc binds it to the running loop). grpc counts its asyncio users and shuts
    its completion queue and poller down when the count falls to zero, with the interpreter's lock
    held; a server stopping while the last other grpc object went away deadlocked a test process
    that way (the event-loop thread waiting inside grpc's shutdown, every other thread waiting for
    the lock). Holding one count of our own for the whole process means that shutdown never runs
    mid-process."""
    global _grpc_aio_kept
    if not _grpc_aio_kept:
        grpc.aio.init_grpc_aio()
        _grpc_aio_kept = True


class LoopThread:
    """An asyncio loop running forever in a daemon thread."""

    def __init__(self, name: str = "petlab-event-loop"):
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def run(self, coroutine: Coroutine[Any, Any, Result], timeout: float) -> Result:
        """Run ``coroutine`` on the loop and wait at most ``timeout`` seconds for its result
        (``TimeoutError`` then; the coroutine is cancelled)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


_shared: LoopThread | None = None
_shared_guard = threading.Lock()


def shared_loop() -> LoopThread:
    """The process's loop thread for in-process servers, started on first use."""
    global _shared
    with _shared_guard:
        if _shared is None:
            _shared = LoopThread()
            _shared.run(_keep_on_loop(), 60.0)
        return _shared


async def _keep_on_loop() -> None:
    keep_grpc_aio()
