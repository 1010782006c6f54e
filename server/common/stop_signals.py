"""The server's stop signals, taken by one thread of its own whatever the native libraries install.

concrete's native libraries install handlers for SIGINT and SIGTERM: its dataflow runtime (HPX)
when it starts (in the middle of the first compilation, or at the first query of a model loaded
from the cache), and the compiler's own pieces for moments at a time while a circuit compiles
(its optimizer, z3, for milliseconds; other stages for seconds). A Ctrl-C that lands on one of
them ends the process with SIGKILL or a crash: no drain, no exit status. Replacing the handlers
cannot win that race.

So the server never lets a thread receive them. :func:`hold` blocks SIGINT, SIGTERM and SIGUSR1 in
the calling thread before any other thread exists (every thread inherits its creator's mask:
gRPC's, the pools', HPX's and OpenMP's); :class:`SignalTaker` takes them with ``sigwait`` on a
thread of its own and hands each to the current route: during the start, the process ends at
once with the signal's exit status (there is nothing to drain); once the server listens, the
event loop drains it (``server.serve``). The route needs the interpreter lock, which a
compilation holds for seconds at a time, so a signal during the start is answered within those
seconds rather than at once. Processes the server starts inherit the mask; Dask's local worker
processes receive SIGINT and SIGTERM again (measured: only SIGUSR1 stays blocked in them, which
Dask does not use).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

#: The signals the server acts on: stop (SIGTERM, SIGINT) and maintenance (SIGUSR1).
HELD = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGUSR1})


def hold() -> None:
    """Block :data:`HELD` in the calling thread, and so in every thread it starts later."""
    signal.pthread_sigmask(signal.SIG_BLOCK, HELD)


def held() -> bool:
    """Whether :func:`hold` has run in the calling thread (the console script's ``serve``)."""
    return signal.pthread_sigmask(signal.SIG_BLOCK, []) >= HELD


class SignalTaker:
    """Takes :data:`HELD` with ``sigwait`` on a daemon thread and calls the current route with
    each signal's number. :func:`hold` must have run in the thread that creates it."""

    def __init__(self, route: Callable[[int], object]):
        self._route = route
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._take, name="stop-signals", daemon=True)
        self._thread.start()

    def reroute(self, route: Callable[[int], object]) -> None:
        with self._lock:
            self._route = route

    def _take(self) -> None:
        while True:
            signum = signal.sigwait(HELD)
            with self._lock:
                route = self._route
            try:
                route(signum)
            except Exception:  # a route that fails must not end the taking of signals
                log.exception("signal %d: its handler failed", signum)
