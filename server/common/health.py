"""petlab's own ``grpc.health.v1.Health`` servicer: no lock is ever held across a send (issue 29).

grpc's ``HealthServicer`` sends each new status to every ``Watch`` stream from the thread that
calls ``set``, holding its lock, and a send waits for the stream's previous one. Measured through a
real ``petlab-server``: one Watch on an HTTP/2 connection that announces a zero window froze every
health ``Check`` (the lock was never released); a second watcher that left at that moment blocked
grpc's own event loop in the servicer's close callback (the whole server froze, and SIGTERM no
longer stopped it).

Here a status change only records the status and wakes the watchers (:meth:`HealthStatuses.set`
holds a condition for a dict update and a notify); each ``Watch`` stream is a generator that sends
from its own call, on the stream guard's threads (``server.common.streams``), the newest status
only (statuses that changed while a send was in progress are coalesced); ``Check`` reads the dict.
One send is bounded by ``server.common.send_deadline``: a watcher that does not take its message
within the deadline is cancelled, never waited for. The messages and the registration helper are
grpc_health's generated ``health_pb2`` / ``health_pb2_grpc``, so clients see the standard protocol.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
POLL_SECONDS = 1.0  # a watcher whose call ended without its callback notices within this
MAX_SERVICE_NAME = 200  # longer names are answered NOT_FOUND / SERVICE_UNKNOWN without a lookup


class HealthStatuses(health_pb2_grpc.HealthServicer):
    """The statuses of the served services and the ``Check`` / ``Watch`` calls (module docstring)."""

    def __init__(self, poll_seconds: float = POLL_SECONDS):
        self._statuses: dict[str, int] = {}
        self._changed = threading.Condition()
        self._shutting_down = False
        self._poll_seconds = poll_seconds

    def set(self, service: str, status: int) -> None:
        """Record ``service``'s status and wake its watchers; returns at once (nothing is sent here).
        Ignored after :meth:`enter_graceful_shutdown`."""
        with self._changed:
            if self._shutting_down:
                return
            self._statuses[service] = status
            self._changed.notify_all()

    def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING for good (later :meth:`set` calls are ignored); returns at once."""
        with self._changed:
            self._shutting_down = True
            for service in self._statuses:
                self._statuses[service] = NOT_SERVING
            self._changed.notify_all()

    def status(self, service: str) -> int | None:
        """``service``'s status, None for a service this server does not know."""
        with self._changed:
            return self._statuses.get(service)

    def Check(self, request, context):
        status = self.status(request.service) if len(request.service) <= MAX_SERVICE_NAME else None
        if status is None:
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details("unknown service")
            return health_pb2.HealthCheckResponse()
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request, context) -> Iterator[health_pb2.HealthCheckResponse]:
        """The current status at once, then each change (the newest one when several came during a
        send) until the call ends. Runs in its own thread; waits only on this servicer's condition,
        never while a send is in progress, and never holds it across a ``yield`` (a send)."""
        service = request.service if len(request.service) <= MAX_SERVICE_NAME else None
        ended = threading.Event()

        def end() -> None:
            ended.set()
            with self._changed:
                self._changed.notify_all()

        if not context.add_callback(end):
            return
        sent: int | None = None
        while True:
            with self._changed:
                self._changed.wait_for(partial(self._news, ended, service, sent), timeout=self._poll_seconds)
                current = self._current(service)
            if ended.is_set() or not context.is_active():
                return
            if current != sent:
                sent = current
                yield health_pb2.HealthCheckResponse(status=current)

    def _news(self, ended: threading.Event, service: str | None, sent: int | None) -> bool:
        """Called with the condition held: the call ended or the status is not the one sent."""
        return ended.is_set() or self._current(service) != sent

    def _current(self, service: str | None) -> int:
        """Called with the condition held."""
        if service is None:
            return SERVICE_UNKNOWN
        return self._statuses.get(service, SERVICE_UNKNOWN)


def add_health_servicer(servicer: HealthStatuses, server: grpc.Server) -> None:
    """Register ``servicer`` under ``grpc.health.v1.Health`` (grpc_health's generated helper)."""
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
