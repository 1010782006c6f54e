"""The encrypted k-NN room's options, their flags and their defaults, in one place.

:class:`KnnOptions` says which models the server hosts and with which circuit settings
(``crypto.knn.model.KnnSettings``), what the key store may hold (in all and per identified owner),
what is admitted at once (``server.common.admission.ServiceLimits``) and where evaluations run (in
process, or on Dask: ``--cluster`` / ``--local-workers``, ``--partitions``). Each default is the
field's here or the type's it holds (``KnnSettings``, ``ServiceLimits``, ``ClusterSpec``); the
``add_*_arguments`` functions make the flags from them, one function per part, and
:meth:`KnnOptions.from_args` reads them back.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

from petlab.crypto.knn.config import check_rounding
from petlab.crypto.knn.families import ALGORITHMS
from petlab.crypto.knn.model import KnnSettings, check_error_budget
from petlab.crypto.knn.thermo.plan import DistanceChoice
from petlab.dask_cluster import ClusterSpec, add_cluster_arguments, spec_from_args
from petlab.server.common.admission import ServiceLimits
from petlab.server.common.environment import add_env_option, env
from petlab.server.knn.datasets import BUNDLED
from petlab.server.knn.evaluators import KEY_CACHE_BYTES

MIB = 1 << 20
HOUR = 3600


@dataclass(frozen=True)
class KnnOptions:
    models: list[str] = field(default_factory=list)  # bundled names, or NAME=FILE.csv
    settings: KnnSettings = field(default_factory=KnnSettings)
    # bundled models with their owner's measured settings (server.knn.datasets.owner_settings)
    # instead of ``settings``; CSV models keep ``settings``
    owner_settings: bool = False
    label_column: str = "label"
    bounds: dict[str, Path] = field(default_factory=dict)  # model name -> public bounds file
    key_idle_seconds: float = 24.0 * HOUR
    key_cap_bytes: int | None = None  # None: key_owners x owner_max_keys x the largest key set
    key_owners: int = 16  # owners the default caps make room for
    key_memory_bytes: int = KEY_CACHE_BYTES  # deserialised key sets kept in memory (server.knn.evaluators)
    limits: ServiceLimits = field(default_factory=ServiceLimits)
    cluster: ClusterSpec = field(default_factory=ClusterSpec)  # where evaluations run (in-process)
    # partitions of each model's training set that one query is split over (crypto.knn.split);
    # 0: automatic (one per worker of the cluster, 1 = whole circuits without a cluster)
    partitions: int = 0
    owner_cap_bytes: int | None = None  # per identified owner; None: owner_max_keys key sets
    owner_max_keys: int = 4

    def check(self, workers: int) -> None:
        """Refuse a configuration that must not run (``ValueError`` with a sentence for a person)."""
        self.limits.check(workers)
        if self.key_memory_bytes <= 0:
            raise ValueError("--key-memory-mb must be positive")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> KnnOptions:
        """The options of parsed flags; ``ValueError`` for a bad combination."""
        bounds = {}
        for item in args.bounds or [b for b in str(env("BOUNDS", "")).split(",") if b]:
            name, _, path = item.partition("=")
            if not name or not path:
                raise ValueError(f"--bounds takes NAME=FILE, got {item!r}")
            bounds[name] = Path(path)
        cluster = spec_from_args(args)
        if args.rounding != "exact" and (args.partitions > 1 or cluster.enabled):
            raise ValueError(
                "--rounding approximate runs one whole circuit: drop --partitions and the cluster"
            )
        return cls(
            models=args.model or [m for m in str(env("MODEL", "")).split(",") if m],
            settings=KnnSettings(
                n=args.n,
                k=args.k,
                bits=args.bits,
                algorithm=args.algorithm,
                distance=DistanceChoice.parse(args.distance) if args.distance else None,
                global_p_error=args.global_p_error,
                rounding=args.rounding,
            ),
            owner_settings=args.owner_settings,
            label_column=args.label_column,
            bounds=bounds,
            key_idle_seconds=args.key_idle_hours * HOUR,
            key_cap_bytes=None if args.key_cap_mb is None else int(args.key_cap_mb * MIB),
            key_owners=args.key_owners,
            key_memory_bytes=int(args.key_memory_mb * MIB),
            limits=ServiceLimits(
                upload_slots=args.upload_slots,
                evaluation_slots=args.evaluation_slots,
                evaluation_waiting=args.evaluation_waiting,
                evaluation_wait_seconds=args.evaluation_wait_seconds,
                first_chunk_seconds=args.upload_first_chunk_seconds,
                min_bytes_per_second=args.upload_min_kib_per_second * 1024,
                owner_upload_slots=args.owner_upload_slots,
                owner_evaluation_slots=args.owner_evaluation_slots,
            ),
            cluster=cluster,
            partitions=args.partitions,
            owner_cap_bytes=None if args.owner_cap_mb is None else int(args.owner_cap_mb * MIB),
            owner_max_keys=args.owner_max_keys,
        )


def add_arguments(group: argparse._ActionsContainer) -> None:
    """The models and their circuits, the key store, the admission limits."""
    add_model_arguments(group)
    add_key_arguments(group)
    add_admission_arguments(group)


def add_model_arguments(group: argparse._ActionsContainer) -> None:
    """Which models, and the circuit settings (:func:`add_circuit_arguments`)."""
    group.add_argument(
        "--model",
        action="append",
        default=None,
        help=f"a model to host: {', '.join(BUNDLED)}, or NAME=FILE.csv; repeatable "
        "[env PETLAB_MODEL, comma-separated]",
    )
    add_env_option(group, "--label-column", str, KnnOptions.label_column, "the label column of CSV models")
    group.add_argument(
        "--bounds",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="public per-feature ranges of model NAME (CSV: feature,low,high); required for CSV models; "
        "repeatable [env PETLAB_BOUNDS, comma-separated]",
    )
    add_circuit_arguments(group)


def add_circuit_arguments(group: argparse._ActionsContainer) -> None:
    """The circuit settings every model is built with (``KnnSettings``'s defaults), or the owner's."""
    default = KnnSettings()
    add_env_option(
        group, "--n", _points, default.n, "training points kept per model ('all': the whole training set)"
    )
    add_env_option(group, "--k", int, default.k, "neighbours")
    add_env_option(group, "--bits", int, default.bits, "bits per quantized feature")
    group.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=env("ALGORITHM", default.algorithm),
        help="encrypted k-NN circuit family [env PETLAB_ALGORITHM]",
    )
    add_env_option(
        group,
        "--distance",
        str,
        "",
        "thermo family: the distance SCALE,CAP[,LOOKUP_BITS] (crypto.knn.thermo.plan.DistanceChoice; "
        "default: from d and bits)",
    )
    add_env_option(
        group,
        "--global-p-error",
        _error_budget,
        default.global_p_error,
        "error budget: the probability, strictly between 0 and 1, that an encrypted answer may differ "
        "from the clear k-NN answer (concrete's global_p_error; published to clients; default: the "
        "family's, 1e-4 for thermo)",
    )
    group.add_argument(
        "--owner-settings",
        action="store_true",
        default=str(env("OWNER_SETTINGS", "")).lower() in ("1", "true", "yes"),
        help="host each bundled model with its data owner's measured settings (the k-NN speed "
        "page's table: n, bits, distance, error budget; wine condensed to the points it needs) "
        "instead of --n, --k, --bits, --algorithm, --distance, --global-p-error and --rounding; "
        "CSV models keep those flags [env PETLAB_OWNER_SETTINGS=1]",
    )
    add_env_option(
        group,
        "--rounding",
        _rounding,
        "exact",
        "thermo family: how distances' low bits are dropped, exact or approximate (concrete's "
        "approximate rounding: faster, but a distance may land one step off, outside the error budget; "
        "published to clients; one circuit only, no --partitions)",
    )


def add_key_arguments(group: argparse._ActionsContainer) -> None:
    """What the key store keeps, in memory and on disk (:class:`KnnOptions`'s defaults)."""
    default = KnnOptions()
    add_env_option(
        group,
        "--key-idle-hours",
        float,
        default.key_idle_seconds / HOUR,
        "registered keys unused this long expire",
    )
    add_env_option(
        group,
        "--key-memory-mb",
        float,
        default.key_memory_bytes / MIB,
        "evaluation key sets kept deserialised in memory, MiB at their stored size (40 MiB for an "
        "Iris key set): room for the callers being served",
    )
    add_env_option(
        group,
        "--key-cap-mb",
        float,
        None if default.key_cap_bytes is None else default.key_cap_bytes / MIB,
        "all stored keys together, MiB (default: --key-owners x --owner-max-keys x the largest "
        "model's key set)",
    )
    add_env_option(
        group,
        "--key-owners",
        int,
        default.key_owners,
        "owners the default key caps make room for, each with --owner-max-keys key sets",
    )


def add_admission_arguments(group: argparse._ActionsContainer) -> None:
    """Uploads and evaluations admitted at once (``ServiceLimits``'s defaults)."""
    default = ServiceLimits()
    add_env_option(
        group,
        "--upload-slots",
        int,
        default.upload_slots,
        "concurrent key uploads; more are refused at once (RESOURCE_EXHAUSTED)",
    )
    add_env_option(
        group,
        "--evaluation-slots",
        int,
        default.evaluation_slots,
        "evaluations admitted at once, one query at a time, shared fairly between callers (at most "
        "--workers)",
    )
    add_env_option(
        group,
        "--evaluation-waiting",
        int,
        default.evaluation_waiting,
        "callers under their fair share that may wait for an evaluation slot (a waiting call holds "
        "no thread; 0: such callers are refused at once)",
    )
    add_env_option(
        group,
        "--evaluation-wait-seconds",
        float,
        default.evaluation_wait_seconds,
        "longest wait for an evaluation slot; then RESOURCE_EXHAUSTED with a retry hint",
    )
    add_env_option(
        group,
        "--upload-first-chunk-seconds",
        float,
        default.first_chunk_seconds,
        "an upload with no chunk by then is cancelled",
    )
    add_env_option(
        group,
        "--upload-min-kib-per-second",
        float,
        default.min_bytes_per_second / 1024,
        "slower uploads are cancelled after a 10 s grace",
    )


def add_placement_arguments(group: argparse._ActionsContainer) -> None:
    """Where evaluations run: in process, or on Dask (``--cluster`` / ``--local-workers``), and
    over how many partitions of each training set."""
    add_cluster_arguments(group)
    add_env_option(
        group,
        "--partitions",
        int,
        KnnOptions.partitions,
        "split one query's work over this many partitions of each training set (crypto.knn.split); "
        "0: one per cluster worker with --cluster/--local-workers, else 1 (the whole circuit in process)",
    )


def add_owner_arguments(group: argparse._ActionsContainer) -> None:
    """What one identified owner may store and run at once (``--owner-cap-mb``, ``--owner-max-keys``:
    bytes of keys plus its uploads in flight, number of key sets; ``--owner-upload-slots``,
    ``--owner-evaluation-slots``: its concurrent uploads and classifications)."""
    default, limits = KnnOptions(), ServiceLimits()
    add_env_option(
        group,
        "--owner-cap-mb",
        float,
        None if default.owner_cap_bytes is None else default.owner_cap_bytes / MIB,
        "per identified owner: stored keys plus uploads in flight, MiB (at most --key-cap-mb; "
        "default: --owner-max-keys key sets of the largest model)",
    )
    add_env_option(
        group,
        "--owner-max-keys",
        int,
        default.owner_max_keys,
        "per identified owner: stored key sets (its oldest make room)",
    )
    add_env_option(
        group,
        "--owner-upload-slots",
        int,
        limits.owner_upload_slots,
        "per identified owner: concurrent key uploads",
    )
    add_env_option(
        group,
        "--owner-evaluation-slots",
        int,
        limits.owner_evaluation_slots,
        "per identified owner: concurrent classifications",
    )


class _BadFlagValue(argparse.ArgumentTypeError, ValueError):
    """A flag value argparse reports with this message (a ``ValueError`` for ``$PETLAB_*`` values)."""


def _rounding(text: str) -> str:
    """``--rounding``: exact or approximate (``crypto.knn.config.check_rounding``)."""
    try:
        return check_rounding(text)
    except ValueError:
        raise _BadFlagValue(f"rounding is 'exact' or 'approximate', got {text!r}") from None


def _error_budget(text: str) -> float:
    """``--global-p-error``: a probability strictly between 0 and 1 (``check_error_budget``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan  # not a number: reported as check_error_budget reports it
    try:
        return check_error_budget(value)
    except ValueError:
        raise _BadFlagValue(
            f"the error budget must be a probability strictly between 0 and 1, got {text!r}"
        ) from None


def _points(text: str) -> int | None:
    """``--n``: a number of training points, or ``all`` (None: the whole training set)."""
    if text == "all":
        return None
    return int(text)  # ValueError: argparse reports an invalid --n value
