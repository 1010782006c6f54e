"""A ``grpc.aio`` prototype of the data owner's server: k-NN, health and reflection on one asyncio
server (issue 29, point 2). An experiment, not the server: ``experiments/server_design.py`` measures
it beside today's threaded ``petlab-server`` and ``docs/explanation/server-design.md`` compares them.

* **k-NN**: the real :class:`~petlab.server.knn.service.KnnServicer`, built by
  ``server.app.build_services`` from the same flags as ``petlab-server serve``; each call runs the
  synchronous method in a thread pool of ``--workers`` threads (``loop.run_in_executor``), through
  :class:`ExecutorContext`, a synchronous view of the asyncio call's context. The event loop never
  runs an evaluation. ``RegisterKeys`` reads its chunks from the loop, one at a time, each within
  ``--request-seconds``.
* **health**: :class:`AsyncHealth`, a small ``grpc.health.v1`` servicer: ``set`` records the status
  and wakes the watchers under an ``asyncio.Condition``; each ``Watch`` is an async generator that
  takes the status under the condition and yields it after releasing it, so no lock is ever held
  across a send; ``Check`` reads a dict. A watcher that does not read holds a suspended coroutine
  and its HTTP/2 stream, no thread and no lock.
* **reflection**: grpc's own (``enable_server_reflection`` installs its asyncio servicer).

Not here (what a migration would still have to build): the interceptors of ``server/common/``
(request arrival, stream budget, call time limit, thread share), TLS, tokens beyond what the
servicer itself checks, the controller, the Paillier baseline, cluster health.

``python -m petlab.experiments.aio_server --model iris --n 6 --algorithm fast --port 0 --port-file F``
takes every ``petlab-server serve`` flag and stops on SIGTERM/SIGINT within ``--grace``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from petlab.exit_status import run_program
from petlab.protos import knn_pb2_grpc
from petlab.protos.message_limits import CHANNEL_OPTIONS
from petlab.server.app import KNN_SERVICE, ServerOptions, Services, build_services
from petlab.server.flags import add_serve_arguments, serve_options

log = logging.getLogger("petlab.aio_server")

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
_END = object()  # the end of a client stream, as RegisterKeys' chunk reader sees it


class AsyncHealth(health_pb2_grpc.HealthServicer):
    """``grpc.health.v1.Health`` on the event loop; no lock is ever held across a send."""

    def __init__(self) -> None:
        self._statuses: dict[str, int] = {}
        self._changed = asyncio.Condition()

    async def set(self, service: str, status: int) -> None:
        """Record ``service``'s status and wake every watcher (none is waited for)."""
        async with self._changed:
            self._statuses[service] = status
            self._changed.notify_all()

    async def set_all(self, status: int) -> None:
        async with self._changed:
            for service in self._statuses:
                self._statuses[service] = status
            self._changed.notify_all()

    async def Check(self, request, context):
        status = self._statuses.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request, context) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        sent: int | None = None

        def changed() -> bool:
            return self._status(request.service) != sent

        while True:
            async with self._changed:
                await self._changed.wait_for(changed)
                sent = self._status(request.service)
            yield health_pb2.HealthCheckResponse(status=sent)  # the condition is released

    def _status(self, service: str) -> int:
        return self._statuses.get(service, SERVICE_UNKNOWN)


class Aborted(Exception):
    """Raised in the executor by :meth:`ExecutorContext.abort`; the loop ends the call with it."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code, self.details = code, details


class ExecutorContext:
    """The synchronous ``grpc.ServicerContext`` a servicer method expects, over an asyncio call's
    context, for a method running in the executor. Reads (peer, metadata, deadline) are taken from
    the asyncio context; ``abort`` raises :class:`Aborted`, which the loop turns into the call's
    status; ``cancel`` cancels the call's task; callbacks run when the call is done."""

    def __init__(self, context: grpc.aio.ServicerContext, loop: asyncio.AbstractEventLoop):
        self._context, self._loop = context, loop
        self._task = asyncio.current_task()
        self._code: grpc.StatusCode | None = None
        self._trailing: tuple = ()
        self._done = threading.Event()
        self._callbacks: list[Callable[[], None]] = []

    def peer(self) -> str:
        return self._context.peer()

    def peer_identities(self):
        return self._context.peer_identities()

    def invocation_metadata(self):
        return self._context.invocation_metadata()

    def time_remaining(self) -> float | None:
        return self._context.time_remaining()

    def is_active(self) -> bool:
        return not self._done.is_set()

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def set_trailing_metadata(self, metadata) -> None:
        self._trailing = tuple(metadata)

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self._callbacks.append(callback)
        return True

    def abort(self, code: grpc.StatusCode, details: str):
        self._code = code
        raise Aborted(code, details)

    def cancel(self) -> None:
        if self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)

    def finish(self) -> None:
        """The call is over: ``is_active`` turns false, callbacks run (on the loop's thread)."""
        self._done.set()
        for callback in self._callbacks:
            try:
                callback()
            except Exception:  # a callback's failure must not change the call's status
                log.exception("call callback failed")


class ExecutorKnn(knn_pb2_grpc.KnnServiceServicer):
    """The k-NN service: each call runs :class:`KnnServicer`'s method in ``pool``."""

    def __init__(
        self, servicer: knn_pb2_grpc.KnnServiceServicer, pool: ThreadPoolExecutor, request_seconds: float
    ):
        self._servicer, self._pool, self._request_seconds = servicer, pool, request_seconds

    async def _run(self, method: Callable[[Any, Any], Any], request: Any, context) -> Any:
        loop = asyncio.get_running_loop()
        view = ExecutorContext(context, loop)
        try:
            return await loop.run_in_executor(self._pool, method, request, view)
        except Aborted as exc:
            if view._trailing:
                context.set_trailing_metadata(view._trailing)
            await context.abort(exc.code, exc.details)
        finally:
            view.finish()

    async def ListModels(self, request, context):
        return await self._run(self._servicer.ListModels, request, context)

    async def GetClientSpecs(self, request, context):
        return await self._run(self._servicer.GetClientSpecs, request, context)

    async def Classify(self, request, context):
        return await self._run(self._servicer.Classify, request, context)

    async def ClassifyBatch(self, request, context):
        return await self._run(self._servicer.ClassifyBatch, request, context)

    async def RegisterKeys(self, request_iterator, context):
        loop = asyncio.get_running_loop()
        chunks = aiter(request_iterator)
        seconds = self._request_seconds

        def blocking_chunks() -> Iterator[Any]:  # runs in the executor; each read on the loop
            while True:
                future = asyncio.run_coroutine_threadsafe(anext(chunks, _END), loop)
                chunk = future.result(timeout=seconds)
                if chunk is _END:
                    return
                yield chunk

        return await self._run(
            lambda _, view: self._servicer.RegisterKeys(blocking_chunks(), view), None, context
        )


class AioServer:
    """The prototype server: :meth:`start` binds and serves, :meth:`stop` flips health and drains."""

    def __init__(self, options: ServerOptions, services: Services):
        self.options, self.services = options, services
        self.pool = ThreadPoolExecutor(max_workers=options.workers, thread_name_prefix="petlab-aio")
        self.health = AsyncHealth()
        self.server = grpc.aio.server(options=list(CHANNEL_OPTIONS))
        self.port = 0

    async def start(self) -> int:
        knn = ExecutorKnn(self.services.knn, self.pool, self.options.request_seconds)
        knn_pb2_grpc.add_KnnServiceServicer_to_server(knn, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (KNN_SERVICE, HEALTH_SERVICE, reflection.SERVICE_NAME), self.server
        )
        self.port = self.server.add_insecure_port(f"{self.options.host}:{self.options.port}")
        if self.port == 0:
            raise OSError(f"could not bind {self.options.host}:{self.options.port}")
        await self.server.start()
        for name in ("", KNN_SERVICE):
            await self.health.set(name, SERVING)
        log.info("aio prototype serving on %s:%d", self.options.host, self.port)
        return self.port

    async def stop(self, grace: float) -> None:
        """NOT_SERVING to every watcher (never waited for), then ``grace`` for in-flight calls; every
        call still open is then cancelled. Evaluations already in the executor finish on their own
        thread, unawaited."""
        await self.health.set_all(NOT_SERVING)
        await self.server.stop(grace)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.services.close()


def check_prototype_options(options: ServerOptions) -> None:
    """The prototype serves plaintext k-NN on loopback only."""
    if not options.plaintext or options.analysis_data or options.cluster.enabled:
        raise ValueError(
            "the aio prototype serves plaintext k-NN in process only (no TLS, controller, cluster)"
        )
    if options.host not in ("127.0.0.1", "::1", "localhost"):
        raise ValueError("the aio prototype listens on loopback only")


async def serve_until_signal(options: ServerOptions, services: Services, grace: float, port_file) -> None:
    server = AioServer(options, services)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    port = await server.start()
    if port_file:
        port_file.write_text(str(port))
    await stopping.wait()
    log.info("signal: draining for up to %.1f s", grace)
    await server.stop(grace)
    log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="aio_server", description=__doc__.splitlines()[0])
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    try:
        options = serve_options(args)
        check_prototype_options(options)
        services = build_services(options)
    except (ValueError, OSError, RuntimeError) as exc:
        log.error("%s", exc)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_until_signal(options, services, args.grace, args.port_file))
    return 0


if __name__ == "__main__":
    run_program(main)  # its status kept after concrete's runtime has run (petlab.exit_status)
