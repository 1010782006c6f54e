"""The encrypted k-NN room at the server's start: its models built and compiled (or loaded from the
cache), where they are evaluated, the key store and its caps, and the servicer over them
(:func:`build_room`). Opens no socket; ``server.app`` composes the room with the others."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from petlab.crypto.knn.families import family
from petlab.crypto.knn.model import KnnModel, build_model
from petlab.dask_cluster import DaskCluster
from petlab.server.common.callers import CallerIdentities, owner_quota
from petlab.server.knn.cluster_evaluation import ClusterEvaluator
from petlab.server.knn.datasets import (
    bundled_public_bounds,
    load_bounds_file,
    load_bundled,
    load_csv,
    owner_settings,
)
from petlab.server.knn.evaluators import Evaluator, LocalEvaluator
from petlab.server.knn.key_store import KeyStore, StoreCaps
from petlab.server.knn.key_warmup import WarmupStore
from petlab.server.knn.model_cache import load_or_compile
from petlab.server.knn.options import KnnOptions
from petlab.server.knn.service import HostedModel, KnnServicer

log = logging.getLogger("petlab.server")


@dataclass
class KnnRoom:
    """Everything the k-NN room serves with, built by :func:`build_room`."""

    hosted: dict[str, HostedModel]
    keys: KeyStore
    evaluator: Evaluator
    servicer: KnnServicer
    prepared_keys: int = 0  # stored evaluation key sets prepared at start (server.knn.key_warmup)

    def close(self) -> None:
        self.keys.close()
        self.evaluator.close()
        for hosted in self.hosted.values():
            hosted.server.cleanup()


def build_room(
    options: KnnOptions,
    data_dir: Path,
    identities: CallerIdentities,
    hosted: dict[str, HostedModel] | None = None,
) -> KnnRoom:
    """The room's models (compiled or loaded from the cache under ``data_dir`` unless given), its
    evaluator, key store and servicer; stored keys with a warm-up query are prepared."""
    starts_cluster = options.cluster.enabled and hosted is None and bool(options.models)
    cluster = DaskCluster.start(options.cluster) if starts_cluster else None  # its size sets --partitions
    try:
        if hosted is None:
            hosted = load_models(options, data_dir, resolve_partitions(options, cluster))
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
    caps = store_caps(options, hosted)
    quota = owner_quota(identities, caps.owner_bytes, options.owner_max_keys, caps.store_bytes)
    if identities.enforced:
        log.info(
            "callers identified by %s; per-owner quota %d bytes, %d key sets",
            "bearer token" if identities.by_token else "client certificate",
            quota.max_bytes if quota else 0,
            quota.max_keys if quota else 0,
        )
    keys = KeyStore(data_dir / "keys", caps.store_bytes, options.key_idle_seconds, quota=quota)
    evaluator = build_evaluator(options, hosted, cluster)
    servicer = KnnServicer(
        hosted, keys, evaluator, WarmupStore(data_dir / "warmup"), options.limits, identities
    )
    room = KnnRoom(hosted, keys, evaluator, servicer)
    room.prepared_keys = servicer.prepare_stored_keys()  # before the port opens: no first-query penalty
    if room.prepared_keys:
        log.info("prepared %d stored evaluation key set(s)", room.prepared_keys)
    return room


def load_models(options: KnnOptions, data_dir: Path, parts: int = 1) -> dict[str, HostedModel]:
    """Build, compile (or load from the cache under ``data_dir/models``) every ``--model``; with
    ``parts`` > 1 each as a split module over that many partitions (fewer for a model with fewer
    points; a family that cannot be split is compiled whole unless ``--partitions`` asked for the
    split)."""
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
        settings = owner_settings(name) if options.owner_settings and not csv_path else options.settings
        model = build_model(
            name,
            train.features,
            train.labels,
            settings,
            train.class_names,
            train.feature_names,
            public_bounds=bounds,
        )
        split = model_parts(model, parts, explicit=options.partitions > 0)
        compiled = load_or_compile(model, model.circuit_config(), data_dir / "models", parts=split)
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


def resolve_partitions(options: KnnOptions, cluster: DaskCluster | None) -> int:
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


def build_evaluator(
    options: KnnOptions, hosted: dict[str, HostedModel], cluster: DaskCluster | None = None
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


def store_caps(options: KnnOptions, hosted: dict[str, HostedModel]) -> StoreCaps:
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
