"""``petlab-server``: the data owner's gRPC server.

``petlab-server serve --port 50051 --data-dir DIR --model iris`` hosts encrypted k-NN models (and the
Paillier baseline over the same training points) with gRPC health checking and server reflection.
Every flag can also come from an environment variable (``PETLAB_PORT``, ``PETLAB_DATA_DIR``,
``PETLAB_MODELS`` as a comma-separated list, ...; see ``--help``). Without ``--tls-cert/--tls-key``
the server listens in plaintext and only on a loopback address, and says so in its log.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pandas as pd
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from petlab.crypto.knn_algorithms import ALGORITHMS, default_config
from petlab.crypto.knn_model import KnnSettings, build_model
from petlab.crypto.trace_chain import load_public_key
from petlab.protos import (
    controller_pb2,
    controller_pb2_grpc,
    knn_pb2,
    knn_pb2_grpc,
    paillier_pb2,
    paillier_pb2_grpc,
)
from petlab.protos.limits import CHANNEL_OPTIONS
from petlab.server.analysis_options import (
    add_analysis_arguments,
    check_identity_gate,
    controller_identity,
    load_analysts,
    load_rules,
)
from petlab.server.cluster_evaluation import ClusterEvaluator
from petlab.server.controller_service import ControllerServicer
from petlab.server.datasets import BUNDLED, bundled_public_bounds, load_bounds_file, load_bundled, load_csv
from petlab.server.identity_options import add_identity_arguments, caller_identities, owner_quota
from petlab.server.key_store import KeyStore
from petlab.server.key_warmup import WarmupStore
from petlab.server.knn_service import HostedModel, KnnServicer
from petlab.server.limits import ServiceLimits
from petlab.server.model_cache import load_or_compile
from petlab.server.paillier_service import PaillierServicer
from petlab.server.session_store import SessionStore
from petlab.server.thread_share import CallTimeLimit, ThreadShare
from petlab.server.undecodable import UndecodableRequests

from petlab.dask_cluster import ClusterSpec, add_cluster_arguments, spec_from_args

log = logging.getLogger("petlab.server")

KNN_SERVICE = knn_pb2.DESCRIPTOR.services_by_name["KnnService"].full_name
PAILLIER_SERVICE = paillier_pb2.DESCRIPTOR.services_by_name["PaillierKnnService"].full_name
CONTROLLER_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["AnalysisController"].full_name
KEY_CHUNK_LIMIT = 4 << 20


@dataclass
class ServerOptions:
    data_dir: Path
    models: list[str]
    host: str = "127.0.0.1"
    port: int = 50051
    settings: KnnSettings = field(default_factory=KnnSettings)
    label_column: str = "label"
    key_idle_seconds: float = 24 * 3600
    key_cap_bytes: int = 4 << 30
    workers: int = 8
    max_concurrent_rpcs: int = 32
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    allow_insecure: bool = False
    analysis_data: Path | None = None
    authority_key: Path | None = None
    analysts: Path | None = None
    open_analysis: bool = False
    rules: Path | None = None
    analysis_cooldown_seconds: float = 3600.0
    controller_id: str | None = None
    # The interactive Paillier baseline answers distances and labels for any query and indices: a
    # caller can reconstruct the training set from a handful of calls. For experiments only.
    enable_paillier_baseline: bool = False
    limits: ServiceLimits = field(default_factory=ServiceLimits)
    bounds: dict[str, Path] = field(default_factory=dict)  # model name -> public bounds file
    cluster: ClusterSpec = field(default_factory=ClusterSpec)  # where evaluations run (in-process)
    tokens: Path | None = None  # bearer tokens file: identifies callers (server.identities)
    owner_cap_bytes: int = 1 << 30  # per identified owner (tokens or client certificates)
    owner_max_keys: int = 4
    controller_threads: int = 2  # of ``workers``, kept from k-NN calls when the controller is served
    call_seconds: float = 900.0  # server-side time limit of every call (server.thread_share)


@dataclass
class RunningServer:
    server: grpc.Server
    port: int
    health: health.HealthServicer
    keys: KeyStore
    hosted: dict[str, HostedModel]
    _expiry_stop: threading.Event
    sessions: SessionStore | None = None
    prepared_keys: int = 0  # stored evaluation key sets prepared at start (server.key_warmup)
    controller: ControllerServicer | None = None
    cluster: ClusterEvaluator | None = None  # with --cluster / --local-workers

    def stop(self, grace: float = 10.0) -> None:
        """Flip health to NOT_SERVING, drain in-flight calls for ``grace`` seconds, release."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self._expiry_stop.set()
        self.keys.close()
        if self.sessions is not None:
            self.sessions.close()
        if self.cluster is not None:
            self.cluster.close()
        for hosted in self.hosted.values():
            hosted.server.cleanup()


def load_models(options: ServerOptions) -> dict[str, HostedModel]:
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
        compiled = load_or_compile(model, default_config(model.algorithm), options.data_dir / "models")
        log.info(
            "model %s ready (%s algorithm, %s, %d PBS per query)",
            name,
            model.algorithm,
            "from cache" if compiled.from_cache else f"compiled in {compiled.compile_seconds:.1f} s",
            compiled.statistics["pbs_count"],
        )
        hosted[name] = HostedModel(model, compiled.server, dataset=Path(csv_path).name if csv_path else name)
    return hosted


def start(options: ServerOptions, hosted: dict[str, HostedModel] | None = None) -> RunningServer:
    """Build and start the server (models compiled or loaded from the cache unless given)."""
    if not options.models and not hosted and not options.analysis_data:
        raise ValueError("nothing to serve: give at least one --model, or --analysis-data")
    plaintext = not (options.tls_cert and options.tls_key)
    if plaintext and not _is_loopback(options.host) and not options.allow_insecure:
        raise ValueError(
            f"refusing plaintext on non-loopback address {options.host}: give "
            "--tls-cert and --tls-key (or --allow-insecure, for a trusted network)"
        )
    # threads k-NN calls never take: the controller's when it is served, else one for health checks
    reserved = options.controller_threads if options.analysis_data else 1
    if not 1 <= reserved < options.workers:
        raise ValueError("--controller-threads must be at least 1 and leave --workers threads for k-NN calls")
    options.limits.check(options.workers - reserved)
    options.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    hosted = hosted if hosted is not None else load_models(options)
    if options.analysis_data:
        check_identity_gate(options.analysts, options.authority_key, options.open_analysis)
    analysis_data = load_analysis_data(options.analysis_data) if options.analysis_data else None
    rules = load_rules(options.rules)
    analysts = load_analysts(options.analysts) if options.analysts else None
    authority = load_public_key(options.authority_key.read_bytes()) if options.authority_key else None
    tls_client_certificates = bool(options.tls_cert and options.tls_key and options.tls_client_ca)
    identities = caller_identities(options.tokens, tls_client_certificates)
    quota = owner_quota(identities, options.owner_cap_bytes, options.owner_max_keys, options.key_cap_bytes)
    if options.tokens and plaintext and not _is_loopback(options.host):
        log.warning("bearer tokens over plaintext (--allow-insecure): anyone on the path can read them")
    keys = KeyStore(options.data_dir / "keys", options.key_cap_bytes, options.key_idle_seconds, quota=quota)
    server = grpc.server(
        ThreadPoolExecutor(max_workers=options.workers, thread_name_prefix="petlab-rpc"),
        maximum_concurrent_rpcs=options.max_concurrent_rpcs,
        options=list(CHANNEL_OPTIONS),
        interceptors=[
            UndecodableRequests(),
            CallTimeLimit(options.call_seconds),
            ThreadShare((KNN_SERVICE, PAILLIER_SERVICE), options.workers - reserved),
        ],
    )
    cluster = None
    if options.cluster.enabled and hosted:
        cluster = ClusterEvaluator.start(options.cluster, {name: h.server for name, h in hosted.items()})
        log.info("evaluations run on the %s", options.cluster.describe())
    knn_servicer = KnnServicer(
        hosted,
        keys,
        WarmupStore(options.data_dir / "warmup"),
        options.limits,
        cluster=cluster,
        identities=identities,
    )
    if identities.enforced:
        log.info(
            "callers identified by %s; per-owner quota %d bytes, %d key sets",
            "bearer token" if options.tokens else "client certificate",
            quota.max_bytes if quota else 0,
            quota.max_keys if quota else 0,
        )
    prepared = knn_servicer.prepare_stored_keys()  # before the port opens: no first-query penalty
    if prepared:
        log.info("prepared %d stored evaluation key set(s)", prepared)
    knn_pb2_grpc.add_KnnServiceServicer_to_server(knn_servicer, server)
    services = [KNN_SERVICE]
    if options.enable_paillier_baseline:
        log.warning(
            "the Paillier baseline is enabled: it reveals distances to, and labels of, the training "
            "points, so any caller can reconstruct the training set; serve it to trusted experiments only"
        )
        paillier_pb2_grpc.add_PaillierKnnServiceServicer_to_server(
            PaillierServicer({name: h.model for name, h in hosted.items()}, identities), server
        )
        services.append(PAILLIER_SERVICE)
    sessions, controller = None, None
    if analysis_data is not None and options.analysis_data is not None:
        sessions = SessionStore(options.data_dir / "sessions.sqlite")
        controller = ControllerServicer(
            analysis_data,
            sessions,
            rules,
            authority_key=authority,
            analysts=analysts,
            cooldown_seconds=options.analysis_cooldown_seconds,
            identity=controller_identity(
                options.analysis_data, rules, options.data_dir, options.controller_id
            ),
        )
        controller_pb2_grpc.add_AnalysisControllerServicer_to_server(controller, server)
        services.append(CONTROLLER_SERVICE)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*services, health.SERVICE_NAME, reflection.SERVICE_NAME), server)

    address = f"{options.host}:{options.port}"
    if options.tls_cert and options.tls_key:
        client_ca = options.tls_client_ca.read_bytes() if options.tls_client_ca else None
        credentials = grpc.ssl_server_credentials(
            [(options.tls_key.read_bytes(), options.tls_cert.read_bytes())],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )
        port = server.add_secure_port(address, credentials)
        log.info("listening with TLS%s on %s:%d", " (mutual)" if client_ca else "", options.host, port)
    else:
        port = server.add_insecure_port(address)
        log.warning("listening WITHOUT TLS on %s:%d: plaintext is for local demos only", options.host, port)
    if port == 0:
        if cluster is not None:
            cluster.close()
        raise OSError(f"could not bind {address}")
    server.start()
    for service in ("", *services):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    if cluster is not None:  # NOT_SERVING while the cluster has no workers

        def cluster_health(serving: bool) -> None:
            status = (
                health_pb2.HealthCheckResponse.SERVING
                if serving
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            for service in ("", KNN_SERVICE):
                health_servicer.set(service, status)

        cluster.watch(cluster_health)

    stop_expiry = threading.Event()

    def expire_keys() -> None:
        while not stop_expiry.wait(min(60.0, options.key_idle_seconds / 4)):
            for key_id in keys.expire():
                log.info("evaluation key %s expired", key_id)
                if cluster is not None:  # and its bytes leave the cluster's memory
                    cluster.forget(key_id)

    threading.Thread(target=expire_keys, name="petlab-key-expiry", daemon=True).start()
    return RunningServer(
        server,
        port,
        health_servicer,
        keys,
        hosted,
        stop_expiry,
        sessions,
        prepared,
        controller=controller,
        cluster=cluster,
    )


def load_analysis_data(path: Path) -> pd.DataFrame:
    """The controller's confidential data: a CSV loaded once at start."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the analysis data {path}: {exc}") from exc
    if frame.empty:
        raise ValueError(f"the analysis data {path} has no records")
    log.info("controller data: %d records, columns %s", len(frame), ", ".join(frame.columns))
    return frame


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _env(name: str, default):
    return os.environ.get(f"PETLAB_{name}", default)


def _env_flag(name: str) -> bool:
    """A yes/no environment variable: 1/true/yes or 0/false/no (any case), unset or empty is no."""
    value = str(_env(name, "")).strip().lower()
    if value not in ("", "0", "1", "false", "true", "no", "yes"):
        raise SystemExit(f"petlab-server: PETLAB_{name} must be 1/0, true/false or yes/no, not {value!r}")
    return value in ("1", "true", "yes")


def parse_args(argv: list[str] | None) -> tuple[ServerOptions, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="petlab-server", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="host encrypted k-NN models")
    serve.add_argument("--host", default=_env("HOST", "127.0.0.1"), help="[PETLAB_HOST] default 127.0.0.1")
    serve.add_argument(
        "--port",
        type=int,
        default=int(_env("PORT", 50051)),
        help="[PETLAB_PORT] default 50051; 0 picks a free port",
    )
    serve.add_argument(
        "--port-file",
        type=Path,
        default=_env("PORT_FILE", None),
        help="[PETLAB_PORT_FILE] write the bound port here once serving",
    )
    serve.add_argument(
        "--data-dir",
        type=Path,
        default=Path(_env("DATA_DIR", "petlab-data")),
        help="[PETLAB_DATA_DIR] compiled models and registered keys",
    )
    default_models = [m for m in _env("MODELS", "").split(",") if m]
    serve.add_argument(
        "--model",
        action="append",
        default=None,
        help=f"[PETLAB_MODELS] {', '.join(BUNDLED)}, or NAME=FILE.csv; repeatable",
    )
    serve.add_argument("--label-column", default=_env("LABEL_COLUMN", "label"))
    serve.add_argument("--n", type=int, default=int(_env("N", 40)), help="training points kept per model")
    serve.add_argument("--k", type=int, default=int(_env("K", 3)))
    serve.add_argument("--bits", type=int, default=int(_env("BITS", 4)))
    serve.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=_env("ALGORITHM", "fast"),
        help="[PETLAB_ALGORITHM] encrypted k-NN circuit: fast (default) or paper (Ameur et al.)",
    )
    serve.add_argument("--key-idle-hours", type=float, default=float(_env("KEY_IDLE_HOURS", 24)))
    serve.add_argument("--key-cap-mb", type=float, default=float(_env("KEY_CAP_MB", 4096)))
    serve.add_argument("--workers", type=int, default=int(_env("WORKERS", 8)))
    serve.add_argument("--max-concurrent-rpcs", type=int, default=int(_env("MAX_CONCURRENT_RPCS", 32)))
    serve.add_argument("--tls-cert", type=Path, default=_env("TLS_CERT", None))
    serve.add_argument("--tls-key", type=Path, default=_env("TLS_KEY", None))
    serve.add_argument(
        "--tls-client-ca",
        type=Path,
        default=_env("TLS_CLIENT_CA", None),
        help="require client certificates signed by this CA (mutual TLS)",
    )
    serve.add_argument(
        "--allow-insecure",
        action="store_true",
        default=_env_flag("ALLOW_INSECURE"),
        help="[PETLAB_ALLOW_INSECURE=1] plaintext on a non-loopback address",
    )
    add_analysis_arguments(serve, _env)
    add_identity_arguments(serve, _env)
    serve.add_argument(
        "--bounds",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="public per-feature ranges of model NAME (CSV: feature,low,high); required for CSV models",
    )
    serve.add_argument(
        "--upload-slots",
        type=int,
        default=int(_env("UPLOAD_SLOTS", 2)),
        help="[PETLAB_UPLOAD_SLOTS] concurrent key uploads; more are refused at once (RESOURCE_EXHAUSTED)",
    )
    serve.add_argument(
        "--evaluation-slots",
        type=int,
        default=int(_env("EVALUATION_SLOTS", 3)),
        help="[PETLAB_EVALUATION_SLOTS] classifications running or waiting; more are refused at once",
    )
    serve.add_argument(
        "--upload-first-chunk-seconds",
        type=float,
        default=float(_env("UPLOAD_FIRST_CHUNK_SECONDS", 10)),
        help="[PETLAB_UPLOAD_FIRST_CHUNK_SECONDS] an upload with no chunk by then is cancelled",
    )
    serve.add_argument(
        "--upload-min-kib-per-second",
        type=float,
        default=float(_env("UPLOAD_MIN_KIB_PER_SECOND", 256)),
        help="[PETLAB_UPLOAD_MIN_KIB_PER_SECOND] slower uploads are cancelled after a 10 s grace",
    )
    serve.add_argument(
        "--controller-threads",
        type=int,
        default=int(_env("CONTROLLER_THREADS", 2)),
        help="[PETLAB_CONTROLLER_THREADS] threads of --workers that k-NN calls never take, kept for "
        "the analysis controller (when --analysis-data is served; else 1 is kept for health checks)",
    )
    serve.add_argument(
        "--call-seconds",
        type=float,
        default=float(_env("CALL_SECONDS", 900)),
        help="[PETLAB_CALL_SECONDS] server-side time limit of every call; a call still running is "
        "cancelled (it must cover the slowest key upload you accept)",
    )
    serve.add_argument(
        "--enable-paillier-baseline",
        action="store_true",
        default=_env_flag("ENABLE_PAILLIER_BASELINE"),
        help="[PETLAB_ENABLE_PAILLIER_BASELINE=1] also serve the interactive Paillier baseline; it "
        "reveals distances and labels, so a caller can reconstruct the training set (experiments only)",
    )
    add_cluster_arguments(serve)  # --cluster ADDRESS | --local-workers N: evaluations on Dask
    serve.add_argument(
        "--grace",
        type=float,
        default=float(_env("GRACE_SECONDS", 30)),
        help="seconds to drain in-flight calls on shutdown",
    )
    args = parser.parse_args(argv)
    bounds = {}
    for item in args.bounds:
        name, _, path = item.partition("=")
        if not name or not path:
            parser.error(f"--bounds takes NAME=FILE, got {item!r}")
        bounds[name] = Path(path)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    try:
        cluster = spec_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    options = ServerOptions(
        data_dir=args.data_dir,
        models=args.model or default_models,
        host=args.host,
        port=args.port,
        settings=KnnSettings(n=args.n, k=args.k, bits=args.bits, algorithm=args.algorithm),
        label_column=args.label_column,
        key_idle_seconds=args.key_idle_hours * 3600,
        key_cap_bytes=int(args.key_cap_mb * (1 << 20)),
        workers=args.workers,
        max_concurrent_rpcs=args.max_concurrent_rpcs,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        allow_insecure=args.allow_insecure,
        enable_paillier_baseline=args.enable_paillier_baseline,
        bounds=bounds,
        cluster=cluster,
        analysis_data=args.analysis_data,
        authority_key=args.authority_key,
        analysts=args.analysts,
        open_analysis=args.open_analysis,
        rules=args.rules,
        analysis_cooldown_seconds=args.analysis_cooldown_seconds,
        controller_id=args.controller_id,
        limits=ServiceLimits(
            upload_slots=args.upload_slots,
            evaluation_slots=args.evaluation_slots,
            first_chunk_seconds=args.upload_first_chunk_seconds,
            min_bytes_per_second=args.upload_min_kib_per_second * 1024,
            owner_upload_slots=args.owner_upload_slots,
            owner_evaluation_slots=args.owner_evaluation_slots,
        ),
        tokens=args.tokens,
        owner_cap_bytes=int(args.owner_cap_mb * (1 << 20)),
        owner_max_keys=args.owner_max_keys,
        controller_threads=args.controller_threads,
        call_seconds=args.call_seconds,
    )
    return options, args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options, args = parse_args(argv)
    try:
        running = start(options)
    except (ValueError, OSError, RuntimeError) as exc:
        log.error("%s", exc)
        return 2
    if args.port_file:
        args.port_file.write_text(str(running.port))
    stopped = threading.Event()

    def shut_down(signum, frame) -> None:
        log.info("signal %d: draining for up to %.0f s", signum, args.grace)

        def drain() -> None:
            running.stop(args.grace)
            stopped.set()

        threading.Thread(target=drain, daemon=True).start()

    signal.signal(signal.SIGTERM, shut_down)
    signal.signal(signal.SIGINT, shut_down)
    stopped.wait()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
