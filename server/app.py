"""The data owner's gRPC server, composed from its rooms: build the services, then serve them.

:class:`ServerOptions` is the rooms' options side by side (each room states its own fields, flags
and defaults: ``server.common.options``, ``server.knn.options``, ``server.controller.options``,
``server.paillier.options``). :func:`build_services` asks each room for its servicer and stores
(``server.knn.startup``: models compiled or loaded from the cache, the key store, the evaluator;
``server.controller.startup``) and opens no socket;
:func:`serve` puts them on one gRPC server with the cross-cutting interceptors, health checking and
reflection, binds the port and starts. :func:`start` is both. Without ``tls_cert``/``tls_key`` the
server listens in plaintext and only on a loopback address, and says so in its log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import grpc
from grpc_reflection.v1alpha import reflection

from petlab.addresses import is_loopback_host
from petlab.crypto.knn.deployment import start_concrete_runtime
from petlab.owner_only import private_directory
from petlab.protos import (
    controller_pb2,
    controller_pb2_grpc,
    knn_pb2,
    knn_pb2_grpc,
    paillier_pb2,
    paillier_pb2_grpc,
)
from petlab.server.common.boundary import CallBoundary
from petlab.server.common.callers import CallerIdentities, caller_identities
from petlab.server.common.event_loop import LoopThread, shared_loop
from petlab.server.common.fair_share import FairSlots
from petlab.server.common.health import (
    NOT_SERVING,
    SERVING,
    HealthStatuses,
    add_health_servicer,
)
from petlab.server.common.health import SERVICE_NAME as HEALTH_SERVICE
from petlab.server.common.options import CommonOptions
from petlab.server.common.transport import raise_descriptor_limit
from petlab.server.common.worker_threads import run_in, threaded
from petlab.server.controller.options import ControllerOptions
from petlab.server.controller.service import ControllerServicer
from petlab.server.controller.session_store import SessionStore
from petlab.server.controller.startup import build_controller
from petlab.server.knn.cluster_evaluation import ClusterEvaluator
from petlab.server.knn.evaluators import Evaluator
from petlab.server.knn.key_store import KeyStore
from petlab.server.knn.options import KnnOptions
from petlab.server.knn.service import HostedModel, KnnServicer
from petlab.server.knn.startup import KnnRoom, build_room
from petlab.server.paillier.options import PaillierOptions
from petlab.server.paillier.service import PaillierServicer

log = logging.getLogger("petlab.server")

KNN_SERVICE = knn_pb2.DESCRIPTOR.services_by_name["KnnService"].full_name
PAILLIER_SERVICE = paillier_pb2.DESCRIPTOR.services_by_name["PaillierKnnService"].full_name
CONTROLLER_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["AnalysisController"].full_name


STOP_MARGIN_SECONDS = 3.0  # RunningServer.stop returns within grace plus this, whatever the peers do
LOCK_FILE = "server.lock"  # in the data directory: one server per directory


@dataclass(frozen=True)
class ServerOptions:
    """Every room's options, each stated (fields, flags, defaults) in its room; ``data_dir`` is
    where every room keeps its files."""

    data_dir: Path
    common: CommonOptions = field(default_factory=CommonOptions)
    knn: KnnOptions = field(default_factory=KnnOptions)
    controller: ControllerOptions = field(default_factory=ControllerOptions)
    paillier: PaillierOptions = field(default_factory=PaillierOptions)

    @classmethod
    def of(cls, data_dir: Path, **fields: Any) -> ServerOptions:
        """Options from field names, each given to the room that declares it
        (``ServerOptions.of(path, port=0, models=["iris"], tokens=file)``: the tests' and the
        experiments' way); ``TypeError`` for a name no room declares."""
        given: dict[str, dict[str, Any]] = {room: {} for room in ROOMS}
        for key, value in fields.items():
            room = next((room for room, kind in ROOMS.items() if key in _field_names(kind)), None)
            if room is None:
                raise TypeError(f"no room of the server has an option {key!r}")
            given[room][key] = value
        return cls(data_dir, **{room: ROOMS[room](**values) for room, values in given.items()})


#: The rooms' options types, under the field of :class:`ServerOptions` that holds each.
ROOMS: dict[str, Any] = {
    "common": CommonOptions,
    "knn": KnnOptions,
    "controller": ControllerOptions,
    "paillier": PaillierOptions,
}


def _field_names(kind: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


@dataclass
class Services:
    """Everything :func:`serve` puts on the port, built by :func:`build_services`; no socket yet."""

    hosted: dict[str, HostedModel]
    keys: KeyStore
    evaluator: Evaluator
    knn: KnnServicer
    identities: CallerIdentities
    paillier: PaillierServicer | None = None
    sessions: SessionStore | None = None
    controller: ControllerServicer | None = None
    prepared_keys: int = 0  # stored evaluation key sets prepared at start (server.knn.key_warmup)

    def names(self) -> list[str]:
        """The gRPC service names these servicers answer."""
        served = [KNN_SERVICE]
        if self.paillier is not None:
            served.append(PAILLIER_SERVICE)
        if self.controller is not None:
            served.append(CONTROLLER_SERVICE)
        return served

    @classmethod
    def of(cls, room: KnnRoom, identities: CallerIdentities) -> Services:
        """The k-NN room's part; the other rooms' servicers are added when they are served."""
        return cls(
            room.hosted,
            room.keys,
            room.evaluator,
            room.servicer,
            identities,
            prepared_keys=room.prepared_keys,
        )

    def close(self) -> None:
        self.keys.close()
        if self.sessions is not None:
            self.sessions.close()
        self.evaluator.close()
        for hosted in self.hosted.values():
            hosted.server.cleanup()


class AsyncServer:
    """The ``grpc.aio`` server for :class:`Services`, on the event loop it is started from: every
    service on one port behind :class:`~petlab.server.common.boundary.CallBoundary`, health and
    reflection beside them. Work that takes CPU runs on two bounded pools (the k-NN room's
    ``--workers`` threads, the controller's ``--controller-threads``); no call holds a thread while
    it waits on its peer."""

    def __init__(self, options: ServerOptions, services: Services):
        self.options, self.services = options, services
        common = options.common
        self.health = HealthStatuses(common.send_seconds)
        self.control: HealthControl | None = None
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._knn_pool = ThreadPoolExecutor(common.workers, thread_name_prefix="petlab-knn")
        self._controller_pool = ThreadPoolExecutor(common.controller_threads, thread_name_prefix="petlab-ctl")
        self._paillier_pool = ThreadPoolExecutor(1, thread_name_prefix="petlab-paillier")
        self._expiry: asyncio.Task | None = None
        self._stopped = False

    async def start(self) -> int:
        options, services = self.options.common, self.services
        limits = self.options.knn.limits
        loop = asyncio.get_running_loop()
        self.health.bind(loop)
        connections = dataclasses.replace(
            options.connections, connections=raise_descriptor_limit(options.connections.connections)
        )
        server = grpc.aio.server(
            interceptors=[CallBoundary(options.call_seconds)],
            options=connections.server_options(options.call_seconds),
        )
        services.knn.use_pool(self._knn_pool)
        knn_pb2_grpc.add_KnnServiceServicer_to_server(services.knn, server)
        if services.paillier is not None:
            slots = FairSlots(1, "Paillier calls", limits.evaluation_waiting)
            paillier = threaded(services.paillier, ("Distances", "Labels"), self._paillier_pool, slots)
            paillier_pb2_grpc.add_PaillierKnnServiceServicer_to_server(paillier, server)
        if services.controller is not None:
            slots = FairSlots(options.controller_threads, "analyses", limits.evaluation_waiting)
            controller = threaded(
                services.controller,
                ("Describe", "OpenSession", "Next"),
                self._controller_pool,
                slots,
                cheap=("Describe",),
            )
            controller_pb2_grpc.add_AnalysisControllerServicer_to_server(controller, server)
        names = services.names()
        add_health_servicer(self.health, server)
        reflection.enable_server_reflection((*names, HEALTH_SERVICE, reflection.SERVICE_NAME), server)
        self.port = _bind(server, options)
        await server.start()
        self._server = server
        cluster = services.evaluator if isinstance(services.evaluator, ClusterEvaluator) else None
        self.control = HealthControl(self.health, ("", *names), ("", KNN_SERVICE) if cluster else ())
        self.control.publish()
        if cluster is not None:  # NOT_SERVING while the cluster has no workers
            cluster.watch(self.control.set_cluster_serving)
        self._expiry = loop.create_task(self._expire_keys(), name="petlab-key-expiry")
        return self.port

    async def _expire_keys(self) -> None:
        services = self.services
        while True:
            await asyncio.sleep(min(60.0, self.options.knn.key_idle_seconds / 4))
            for key_id in await run_in(self._knn_pool, services.keys.expire):
                log.info("evaluation key %s expired", key_id)
                services.evaluator.forget(key_id)  # and its bytes leave the evaluator's memory

    async def stop(self, grace: float) -> None:
        """Health NOT_SERVING to every watcher (never waited for), ``grace`` seconds for the calls
        in flight, then every call still open is cancelled; returns within ``grace`` +
        :data:`STOP_MARGIN_SECONDS` whatever the peers do. Evaluations already running finish on
        their threads, unawaited. Stopping twice is harmless."""
        if self._stopped:
            return
        self._stopped = True
        self.health.enter_graceful_shutdown()
        if self._expiry is not None:
            self._expiry.cancel()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.stop(grace), grace + STOP_MARGIN_SECONDS)
            except TimeoutError:
                log.warning(
                    "the gRPC server did not confirm its stop within %.0f s", grace + STOP_MARGIN_SECONDS
                )
        for pool in (self._knn_pool, self._controller_pool, self._paillier_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    def set_maintenance(self, down: bool) -> None:
        """The owner takes the server out of rotation (health NOT_SERVING for every service while
        calls are still answered) or puts it back; ``petlab-server serve`` does it on SIGUSR1."""
        if self.control is not None:
            self.control.set_maintenance(down)


@dataclass
class RunningServer:
    """A server started from synchronous code (tests, experiments, the library): its
    :class:`AsyncServer` runs on the process's shared event-loop thread
    (``server.common.event_loop``)."""

    server: AsyncServer
    loop: LoopThread
    directory_lock: IO[bytes] | None = None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def services(self) -> Services:
        return self.server.services

    @property
    def health(self) -> HealthStatuses:
        return self.server.health

    @property
    def health_control(self) -> HealthControl | None:
        return self.server.control

    @property
    def keys(self) -> KeyStore:
        return self.services.keys

    @property
    def hosted(self) -> dict[str, HostedModel]:
        return self.services.hosted

    @property
    def sessions(self) -> SessionStore | None:
        return self.services.sessions

    @property
    def controller(self) -> ControllerServicer | None:
        return self.services.controller

    @property
    def prepared_keys(self) -> int:
        return self.services.prepared_keys

    @property
    def cluster(self) -> ClusterEvaluator | None:
        """The cluster evaluator, with ``--cluster`` / ``--local-workers``."""
        evaluator = self.services.evaluator
        return evaluator if isinstance(evaluator, ClusterEvaluator) else None

    def stop(self, grace: float = 10.0) -> None:
        """:meth:`AsyncServer.stop`, then the stores closed and the data directory released;
        returns within ``grace`` + :data:`STOP_MARGIN_SECONDS` (plus closing the stores)."""
        if self.directory_lock is None:
            return
        try:
            self.loop.run(self.server.stop(grace), grace + 2 * STOP_MARGIN_SECONDS)
        except TimeoutError:
            log.warning("the server's stop did not finish within %.0f s", grace + 2 * STOP_MARGIN_SECONDS)
        self.services.close()
        release_directory(self.directory_lock)
        self.directory_lock = None

    def set_maintenance(self, down: bool) -> None:
        self.server.set_maintenance(down)


def lock_directory(data_dir: Path) -> IO[bytes]:
    """Take the data directory for this server (a lock on :data:`LOCK_FILE` held until
    :func:`release_directory` or the process ends); ``OSError`` when another server has it."""
    handle = open(data_dir / LOCK_FILE, "ab")  # noqa: SIM115 (held open for the server's life)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise OSError(
            f"another petlab-server is using the data directory {data_dir}; stop it, or give this "
            "one its own --data-dir"
        ) from None
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n".encode())
    handle.flush()
    return handle


def release_directory(handle: IO[bytes]) -> None:
    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    handle.close()


@dataclass
class HealthControl:
    """The statuses the server publishes: SERVING unless the owner put it in maintenance or, for the
    k-NN service, the cluster has no workers. Every change goes through :meth:`HealthStatuses.set`,
    which never waits on a watcher."""

    health: HealthStatuses
    services: tuple[str, ...]  # every served name; "" is the server as a whole
    cluster_dependent: tuple[str, ...] = ()
    maintenance: bool = False
    cluster_serving: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self) -> None:
        with self._lock:
            for name in self.services:
                up = not self.maintenance and (self.cluster_serving or name not in self.cluster_dependent)
                self.health.set(name, SERVING if up else NOT_SERVING)

    def set_maintenance(self, down: bool) -> None:
        self.maintenance = down
        self.publish()

    def set_cluster_serving(self, serving: bool) -> None:
        self.cluster_serving = serving
        self.publish()


def check_options(options: ServerOptions, models_given: bool = False) -> None:
    """Refuse a configuration that must not run (``ValueError`` with a sentence for a person):
    nothing to serve, then each room's own checks."""
    if not options.knn.models and not models_given and not options.controller.analysis_data:
        raise ValueError("nothing to serve: give at least one --model, or --analysis-data")
    options.common.check()
    options.knn.check(options.common.workers)
    options.controller.check()


def build_services(options: ServerOptions, hosted: dict[str, HostedModel] | None = None) -> Services:
    """Every room's servicer and stores (the k-NN models compiled or loaded from the cache unless
    given); no socket is opened."""
    check_options(options, models_given=bool(hosted))
    common = options.common
    start_concrete_runtime()  # before any evaluation thread: concrete's SIGPIPE handler is undone
    private_directory(options.data_dir, "to keep the server's data there")
    identities = caller_identities(common.tokens, bool(not common.plaintext and common.tls_client_ca))
    if common.tokens and common.plaintext and not is_loopback_host(common.host):
        log.warning("bearer tokens over plaintext (--allow-insecure): anyone on the path can read them")
    room = build_room(options.knn, options.data_dir, identities, hosted)
    services = Services.of(room, identities)
    if options.paillier.enable_paillier_baseline:
        log.warning(
            "the Paillier baseline is enabled: it reveals distances to, and labels of, the training "
            "points, so any caller can reconstruct the training set; serve it to trusted experiments only"
        )
        services.paillier = PaillierServicer({name: h.model for name, h in room.hosted.items()}, identities)
    if options.controller.analysis_data is not None:
        services.controller, services.sessions = build_controller(
            options.controller, options.controller.analysis_data, options.data_dir
        )
    return services


def serve(options: ServerOptions, services: Services) -> RunningServer:
    """Put ``services`` on one ``grpc.aio`` server on the process's shared event-loop thread."""
    loop = shared_loop()
    server = AsyncServer(options, services)
    loop.run(server.start(), 60.0)
    return RunningServer(server, loop)


def start(options: ServerOptions, hosted: dict[str, HostedModel] | None = None) -> RunningServer:
    """Take the data directory, build and serve (models compiled or loaded from the cache unless
    given); ``OSError`` when another server holds the directory or the port is taken."""
    private_directory(options.data_dir, "to keep the server's data there")
    directory_lock = lock_directory(options.data_dir)
    try:
        services = build_services(options, hosted)
    except BaseException:
        release_directory(directory_lock)
        raise
    try:
        running = serve(options, services)
    except BaseException:
        services.close()
        release_directory(directory_lock)
        raise
    running.directory_lock = directory_lock
    return running


def _bind(server: grpc.aio.Server, options: CommonOptions) -> int:
    address = f"{options.host}:{options.port}"
    if options.tls_cert and options.tls_key:
        client_ca = options.tls_client_ca.read_bytes() if options.tls_client_ca else None
        credentials = grpc.ssl_server_credentials(
            [(options.tls_key.read_bytes(), options.tls_cert.read_bytes())],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )
        port = server.add_secure_port(address, credentials)
        if port == 0:
            raise OSError(_port_taken(address))
        log.info("listening with TLS%s on %s:%d", " (mutual)" if client_ca else "", options.host, port)
    else:
        try:
            port = server.add_insecure_port(address)
        except RuntimeError:
            port = 0
        if port == 0:
            raise OSError(_port_taken(address))
        log.warning("listening WITHOUT TLS on %s:%d: plaintext is for local demos only", options.host, port)
    return port


def _port_taken(address: str) -> str:
    return (
        f"could not listen on {address}: the port is taken (another server?) or the address is not "
        "this machine's; stop the other server or choose another --port"
    )
