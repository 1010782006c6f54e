"""The data owner's gRPC server, composed from its rooms: build the services, then serve them.

:func:`build_services` makes every servicer and store from :class:`ServerOptions` (models compiled
or loaded from the cache, the key store, the evaluator, the controller) and opens no socket;
:func:`serve` puts them on one gRPC server with the cross-cutting interceptors, health checking and
reflection, binds the port and starts. :func:`start` is both. Without ``tls_cert``/``tls_key`` the
server listens in plaintext and only on a loopback address, and says so in its log.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
import pandas as pd
from grpc_reflection.v1alpha import reflection

from petlab.addresses import is_loopback_host
from petlab.crypto.chain.traces import load_public_key
from petlab.crypto.knn.deployment import start_concrete_runtime
from petlab.crypto.knn.families import family
from petlab.crypto.knn.model import KnnModel, KnnSettings, build_model
from petlab.dask_cluster import ClusterSpec, DaskCluster
from petlab.owner_only import private_directory
from petlab.protos import (
    controller_pb2,
    controller_pb2_grpc,
    knn_pb2,
    knn_pb2_grpc,
    paillier_pb2,
    paillier_pb2_grpc,
)
from petlab.server.common.admission import ServiceLimits
from petlab.server.common.boundary import CallBoundary
from petlab.server.common.callers import CallerIdentities, caller_identities, owner_quota
from petlab.server.common.event_loop import LoopThread, shared_loop
from petlab.server.common.fair_share import FairSlots
from petlab.server.common.health import (
    NOT_SERVING,
    SEND_SECONDS,
    SERVING,
    HealthStatuses,
    add_health_servicer,
)
from petlab.server.common.health import SERVICE_NAME as HEALTH_SERVICE
from petlab.server.common.transport import ConnectionLimits, raise_descriptor_limit
from petlab.server.common.worker_threads import run_in, threaded
from petlab.server.controller.configuration import (
    check_identity_gate,
    controller_identity,
    load_analysts,
    load_rules,
)
from petlab.server.controller.people import PersonPolicy
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.service import ControllerServicer
from petlab.server.controller.session_store import SessionStore
from petlab.server.knn.cluster_evaluation import ClusterEvaluator
from petlab.server.knn.datasets import bundled_public_bounds, load_bounds_file, load_bundled, load_csv
from petlab.server.knn.evaluators import KEY_CACHE_BYTES, Evaluator, LocalEvaluator
from petlab.server.knn.key_store import KeyStore, StoreCaps
from petlab.server.knn.key_warmup import WarmupStore
from petlab.server.knn.model_cache import load_or_compile
from petlab.server.knn.service import HostedModel, KnnServicer
from petlab.server.paillier.service import PaillierServicer

log = logging.getLogger("petlab.server")

KNN_SERVICE = knn_pb2.DESCRIPTOR.services_by_name["KnnService"].full_name
PAILLIER_SERVICE = paillier_pb2.DESCRIPTOR.services_by_name["PaillierKnnService"].full_name
CONTROLLER_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["AnalysisController"].full_name


STOP_MARGIN_SECONDS = 3.0  # RunningServer.stop returns within grace plus this, whatever the peers do
LOCK_FILE = "server.lock"  # in the data directory: one server per directory


@dataclass
class ServerOptions:
    data_dir: Path
    models: list[str]
    host: str = "127.0.0.1"
    port: int = 50051
    settings: KnnSettings = field(default_factory=KnnSettings)
    label_column: str = "label"
    key_idle_seconds: float = 24 * 3600
    key_cap_bytes: int | None = None  # None: key_owners x owner_max_keys x the largest key set
    key_owners: int = 16  # owners the default caps make room for
    key_memory_bytes: int = KEY_CACHE_BYTES  # deserialised key sets kept in memory (server.knn.evaluators)
    workers: int = 4  # threads for the k-NN room's work (evaluations, key checks) and the baseline's
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    allow_insecure: bool = False
    analysis_data: Path | None = None
    analysis_domain: Path | None = None
    authority_key: Path | None = None
    analysts: Path | None = None
    open_analysis: bool = False
    rules: Path | None = None
    analysis_cooldown_seconds: float = 3600.0
    analysis_refusal_budget: int = 3
    analysis_quota_per_day: int = 1000
    analysis_audit_seconds: float = 2.0
    controller_id: str | None = None
    # The interactive Paillier baseline answers distances and labels for any query and indices: a
    # caller can reconstruct the training set from a handful of calls. For experiments only.
    enable_paillier_baseline: bool = False
    limits: ServiceLimits = field(default_factory=ServiceLimits)
    bounds: dict[str, Path] = field(default_factory=dict)  # model name -> public bounds file
    cluster: ClusterSpec = field(default_factory=ClusterSpec)  # where evaluations run (in-process)
    # partitions of each model's training set that one query is split over (crypto.knn.split);
    # 0: automatic (one per worker of the cluster, 1 = whole circuits without a cluster)
    partitions: int = 0
    tokens: Path | None = None  # bearer tokens file: identifies callers (server.common.callers)
    owner_cap_bytes: int | None = None  # per identified owner; None: owner_max_keys key sets
    owner_max_keys: int = 4
    controller_threads: int = 2  # threads for the analysis controller's decisions
    call_seconds: float = 900.0  # server-side time limit of every call (server.common.boundary)
    send_seconds: float = SEND_SECONDS  # a health watcher takes each status within this
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)  # server.common.transport

    @property
    def plaintext(self) -> bool:
        return not (self.tls_cert and self.tls_key)


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
        self.health = HealthStatuses(options.send_seconds)
        self.control: HealthControl | None = None
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._knn_pool = ThreadPoolExecutor(options.workers, thread_name_prefix="petlab-knn")
        self._controller_pool = ThreadPoolExecutor(
            options.controller_threads, thread_name_prefix="petlab-ctl"
        )
        self._paillier_pool = ThreadPoolExecutor(1, thread_name_prefix="petlab-paillier")
        self._expiry: asyncio.Task | None = None
        self._stopped = False

    async def start(self) -> int:
        options, services = self.options, self.services
        loop = asyncio.get_running_loop()
        self.health.bind(loop)
        connections = ConnectionLimits(
            **{
                **options.connections.__dict__,
                "connections": raise_descriptor_limit(options.connections.connections),
            }
        )
        server = grpc.aio.server(
            interceptors=[CallBoundary(options.call_seconds)],
            options=connections.server_options(options.call_seconds),
        )
        services.knn.use_pool(self._knn_pool)
        knn_pb2_grpc.add_KnnServiceServicer_to_server(services.knn, server)
        if services.paillier is not None:
            slots = FairSlots(1, "Paillier calls", options.limits.evaluation_waiting)
            paillier = threaded(services.paillier, ("Distances", "Labels"), self._paillier_pool, slots)
            paillier_pb2_grpc.add_PaillierKnnServiceServicer_to_server(paillier, server)
        if services.controller is not None:
            slots = FairSlots(options.controller_threads, "analyses", options.limits.evaluation_waiting)
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
            await asyncio.sleep(min(60.0, self.options.key_idle_seconds / 4))
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


def load_models(options: ServerOptions, parts: int = 1) -> dict[str, HostedModel]:
    """Build, compile (or load from the cache) every ``--model``; with ``parts`` > 1 each as a
    split module over that many partitions (fewer for a model with fewer points; a family that
    cannot be split is compiled whole unless ``--partitions`` asked for the split)."""
    hosted = {}
    for spec in options.models:
        name, _, csv_path = spec.partition("=")
        dataset = load_csv(Path(csv_path), options.label_column, name) if csv_path else load_bundled(name)
        if name in options.bounds:
            bounds = load_bounds_file(options.bounds[name], dataset.feature_names)
        elif not csv_path:
            bounds = bundled_public_bounds(name)
        else:
            raise ValueError(
                f"model {name}: pass --bounds {name}=FILE with public per-feature ranges (feature,low,high); "
                "the server never publishes its training set's own minima and maxima"
            )
        train, _ = dataset.split()
        model = build_model(
            name,
            train.features,
            train.labels,
            options.settings,
            train.class_names,
            train.feature_names,
            public_bounds=bounds,
        )
        split = model_parts(model, parts, explicit=options.partitions > 0)
        compiled = load_or_compile(model, model.circuit_config(), options.data_dir / "models", parts=split)
        log.info(
            "model %s ready (%s algorithm, %s, %d PBS per query%s)",
            name,
            model.algorithm,
            "from cache" if compiled.from_cache else f"compiled in {compiled.compile_seconds:.1f} s",
            compiled.statistics["pbs_count"],
            f", split over {split} partitions" if split > 1 else "",
        )
        hosted[name] = HostedModel(
            model,
            compiled.server,
            dataset=Path(csv_path).name if csv_path else name,
            graph=compiled.graph,
        )
    return hosted


def model_parts(model: KnnModel, parts: int, explicit: bool) -> int:
    """The partitions one model is split over: ``parts``, at most its n, and 1 (whole) for a family
    that cannot be split, which is an error only when ``--partitions`` asked for a split."""
    if parts <= 1:
        return 1
    if family(model.algorithm).split is None:
        if explicit:
            raise ValueError(f"--partitions: the {model.algorithm} family cannot split one query")
        log.info("model %s: the %s family is evaluated whole, not split", model.name, model.algorithm)
        return 1
    return min(parts, model.plan.n)


def resolve_partitions(options: ServerOptions, cluster: DaskCluster | None) -> int:
    """``--partitions``, or automatically: one per worker of the cluster (``--local-workers N``: N;
    ``--cluster``: the workers the scheduler has now), and 1 (whole circuits) without a cluster."""
    if options.partitions < 0:
        raise ValueError("--partitions cannot be negative")
    if options.partitions:
        return options.partitions
    if cluster is None:
        return 1
    if options.cluster.local_workers:
        return options.cluster.local_workers
    return max(cluster.worker_count(), 1)


def analysis_domain(path: Path | None, data: pd.DataFrame) -> PublicDomain:
    """The public attribute domain (``--analysis-domain``; issue 30): the file given, else the
    shipped ACS 2013 domain when the data has its columns; never one read off the records."""
    domain = PublicDomain.load(path) if path is not None else PublicDomain.shipped_for(data)
    if domain is None:
        raise ValueError(
            "the analysis data needs its public attribute domain: --analysis-domain FILE (one line "
            "per column: its name, then its values)"
        )
    return domain


def load_analysis_data(path: Path) -> pd.DataFrame:
    """The controller's confidential data: a CSV loaded once at start."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the analysis data {path}: {exc}") from exc
    if frame.empty:
        raise ValueError(f"the analysis data {path} has no records")
    # the columns only: the number of records is a figure of the data that the audit never saw
    log.info("controller data: columns %s", ", ".join(frame.columns))
    return frame


def check_options(options: ServerOptions, models_given: bool = False) -> None:
    """Refuse a configuration that must not run (``ValueError`` with a sentence for a person)."""
    if not options.models and not models_given and not options.analysis_data:
        raise ValueError("nothing to serve: give at least one --model, or --analysis-data")
    if options.plaintext and not is_loopback_host(options.host) and not options.allow_insecure:
        raise ValueError(
            f"refusing plaintext on non-loopback address {options.host}: give "
            "--tls-cert and --tls-key (or --allow-insecure, for a trusted network)"
        )
    if options.workers < 1 or options.controller_threads < 1:
        raise ValueError("--workers and --controller-threads must be at least 1")
    options.limits.check(options.workers)
    options.connections.check()
    if options.call_seconds <= 0 or options.send_seconds <= 0:
        raise ValueError("--call-seconds and --send-seconds must be positive")
    if options.key_memory_bytes <= 0:
        raise ValueError("--key-memory-mb must be positive")
    if options.analysis_data:
        check_identity_gate(options.analysts, options.authority_key, options.open_analysis)


def build_evaluator(
    options: ServerOptions, hosted: dict[str, HostedModel], cluster: DaskCluster | None = None
) -> Evaluator:
    """In this process, or on the Dask cluster the options name (``cluster``, if already started)."""
    servers = {name: h.server for name, h in hosted.items()}
    graphs = {name: h.graph for name, h in hosted.items() if h.graph is not None}
    if options.cluster.enabled and hosted:
        cluster = cluster or DaskCluster.start(options.cluster)
        try:
            evaluator = ClusterEvaluator(cluster, servers, graphs)
        except Exception:
            cluster.close()
            raise
        log.info("evaluations run on the %s", options.cluster.describe())
        return evaluator
    if cluster is not None:
        cluster.close()
    return LocalEvaluator(servers, graphs, options.key_memory_bytes)


def store_caps(options: ServerOptions, hosted: dict[str, HostedModel]) -> StoreCaps:
    """The key store's caps: those given, else room for ``key_owners`` owners with
    ``owner_max_keys`` key sets each of the largest hosted model's size (``StoreCaps``)."""
    largest = max((h.key_size_window[1] for h in hosted.values()), default=1 << 20)
    default = StoreCaps.for_owners(largest, options.key_owners, options.owner_max_keys)
    caps = StoreCaps(
        options.key_cap_bytes if options.key_cap_bytes is not None else default.store_bytes,
        options.owner_cap_bytes if options.owner_cap_bytes is not None else default.owner_bytes,
    )
    if hosted:
        log.info(
            "key store: %.0f MiB in all, %.0f MiB per identified owner (a key set is up to %.1f MiB; "
            "defaults: %d owners x %d key sets)",
            caps.store_bytes / (1 << 20),
            caps.owner_bytes / (1 << 20),
            largest / (1 << 20),
            options.key_owners,
            options.owner_max_keys,
        )
    if hosted and min(caps.store_bytes, caps.owner_bytes) < largest:
        log.warning(
            "the key caps leave no room for one key set of the largest model: uploads will be refused"
        )
    return caps


def build_services(options: ServerOptions, hosted: dict[str, HostedModel] | None = None) -> Services:
    """Every servicer and store of the server (models compiled or loaded from the cache unless
    given); no socket is opened."""
    check_options(options, models_given=bool(hosted))
    start_concrete_runtime()  # before any evaluation thread: concrete's SIGPIPE handler is undone
    private_directory(options.data_dir, "to keep the server's data there")
    starts_cluster = options.cluster.enabled and hosted is None and bool(options.models)
    cluster = DaskCluster.start(options.cluster) if starts_cluster else None  # its size sets --partitions
    try:
        if hosted is None:
            hosted = load_models(options, resolve_partitions(options, cluster))
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
    identities = caller_identities(options.tokens, bool(not options.plaintext and options.tls_client_ca))
    caps = store_caps(options, hosted)
    quota = owner_quota(identities, caps.owner_bytes, options.owner_max_keys, caps.store_bytes)
    if options.tokens and options.plaintext and not is_loopback_host(options.host):
        log.warning("bearer tokens over plaintext (--allow-insecure): anyone on the path can read them")
    if identities.enforced:
        log.info(
            "callers identified by %s; per-owner quota %d bytes, %d key sets",
            "bearer token" if options.tokens else "client certificate",
            quota.max_bytes if quota else 0,
            quota.max_keys if quota else 0,
        )
    keys = KeyStore(options.data_dir / "keys", caps.store_bytes, options.key_idle_seconds, quota=quota)
    evaluator = build_evaluator(options, hosted, cluster)
    knn = KnnServicer(
        hosted, keys, evaluator, WarmupStore(options.data_dir / "warmup"), options.limits, identities
    )
    services = Services(hosted, keys, evaluator, knn, identities)
    services.prepared_keys = knn.prepare_stored_keys()  # before the port opens: no first-query penalty
    if services.prepared_keys:
        log.info("prepared %d stored evaluation key set(s)", services.prepared_keys)
    if options.enable_paillier_baseline:
        log.warning(
            "the Paillier baseline is enabled: it reveals distances to, and labels of, the training "
            "points, so any caller can reconstruct the training set; serve it to trusted experiments only"
        )
        services.paillier = PaillierServicer({name: h.model for name, h in hosted.items()}, identities)
    if options.analysis_data is not None:
        analysis_data = load_analysis_data(options.analysis_data)
        rules = load_rules(options.rules)
        services.sessions = SessionStore(options.data_dir / "sessions.sqlite")
        services.controller = ControllerServicer(
            analysis_data,
            services.sessions,
            rules,
            authority_key=load_public_key(options.authority_key.read_bytes())
            if options.authority_key
            else None,
            analysts=load_analysts(options.analysts) if options.analysts else None,
            policy=PersonPolicy(
                options.analysis_refusal_budget,
                options.analysis_cooldown_seconds,
                options.analysis_quota_per_day,
            ),
            identity=controller_identity(
                options.analysis_data, rules, options.data_dir, options.controller_id
            ),
            diagnostics=options.data_dir / "controller-diagnostics.log",
            domain=analysis_domain(options.analysis_domain, analysis_data),
            audit_seconds=options.analysis_audit_seconds,
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


def _bind(server: grpc.aio.Server, options: ServerOptions) -> int:
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
