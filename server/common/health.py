"""petlab's ``grpc.health.v1.Health`` servicer, on the event loop: no lock, no thread per watcher.

:meth:`HealthStatuses.set` may be called from any thread (the owner's SIGUSR1, the cluster's
watcher): it records the status and wakes the watchers on the loop, and returns at once. ``Check``
and ``List`` read the dict. Each ``Watch`` sends the current status, then the newest one after every change
(statuses that changed during a send are coalesced); each send must be taken by the peer within
``send_seconds``, or the call's coroutine is cancelled (logged): a watcher that stops reading is
dropped, never waited for. No status can reach such a peer, so its HTTP/2 stream stays open on its
connection (one of the connection's ``--max-streams-per-connection``) until the peer leaves or the
connection's age limit ends it. The messages and the
registration helper are grpc_health's generated ``health_pb2`` / ``health_pb2_grpc``, so clients
see the standard protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.server.common.rpc_errors import NotFound

log = logging.getLogger(__name__)
SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
MAX_SERVICE_NAME = 200  # longer names are answered NOT_FOUND / SERVICE_UNKNOWN without a lookup
SEND_SECONDS = 5.0  # a watcher must take each status within this


class HealthStatuses(health_pb2_grpc.HealthServicer):
    """The statuses of the served services and the ``Check`` / ``Watch`` calls (module docstring).
    Bound to the event loop that serves it (:meth:`bind`)."""

    def __init__(self, send_seconds: float = SEND_SECONDS):
        self._statuses: dict[str, int] = {}
        self._guard = threading.Lock()  # the dict, between the loop and threads calling set()
        self._shutting_down = False
        self._send_seconds = send_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve from ``loop`` (called on it, before the server starts)."""
        self._loop, self._changed = loop, asyncio.Event()

    def set(self, service: str, status: int) -> None:
        """Record ``service``'s status and wake its watchers; returns at once, from any thread.
        Ignored after :meth:`enter_graceful_shutdown`."""
        with self._guard:
            if self._shutting_down:
                return
            self._statuses[service] = status
        self._wake()

    def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING for good (later :meth:`set` calls are ignored); returns at once."""
        with self._guard:
            self._shutting_down = True
            for service in self._statuses:
                self._statuses[service] = NOT_SERVING
        self._wake()

    def status(self, service: str) -> int | None:
        """``service``'s status, None for a service this server does not know."""
        with self._guard:
            return self._statuses.get(service)

    async def Check(self, request, context):
        status = self.status(request.service) if len(request.service) <= MAX_SERVICE_NAME else None
        if status is None:
            raise NotFound("unknown service")
        return health_pb2.HealthCheckResponse(status=status)

    async def List(self, request, context):
        """Every served service's status (the server as a whole under "")."""
        with self._guard:
            statuses = dict(self._statuses)
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status) for name, status in statuses.items()
            }
        )

    async def Watch(self, request, context) -> None:
        """The current status at once, then each change (the newest when several came during a
        send) until the call ends; a send not taken within ``send_seconds`` ends the call."""
        service = request.service if len(request.service) <= MAX_SERVICE_NAME else None
        assert self._changed is not None, "HealthStatuses.bind was not called"
        sent: int | None = None
        while True:
            changed = self._changed
            current = SERVICE_UNKNOWN if service is None else (self.status(service) or SERVICE_UNKNOWN)
            if current != sent:
                sent = current
                try:
                    await asyncio.wait_for(
                        context.write(health_pb2.HealthCheckResponse(status=current)), self._send_seconds
                    )
                except TimeoutError:
                    log.info(
                        "dropped a health watcher (%s) that took no status in %g s",
                        context.peer(),
                        self._send_seconds,
                    )
                    # the call ends here (no status can reach a peer that does not read); its
                    # stream stays on the connection until the peer or the connection's limits end it
                    task = asyncio.current_task()
                    assert task is not None  # a call's handler runs in its task
                    task.cancel()
                    await asyncio.sleep(0)
                continue
            await changed.wait()

    def _wake(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._renew)

    def _renew(self) -> None:
        """On the loop: wake every watcher waiting on the current event, and start a new one."""
        changed, self._changed = self._changed, asyncio.Event()
        if changed is not None:
            changed.set()


def add_health_servicer(servicer: HealthStatuses, server: grpc.aio.Server) -> None:
    """Register ``servicer`` under ``grpc.health.v1.Health`` (grpc_health's generated helper)."""
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
