"""``petlab-server serve`` flags of the encrypted k-NN room: which models, the circuit settings,
the key store's caps, admission slots and where evaluations run (``--cluster`` / ``--local-workers``,
``--partitions``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from petlab.crypto.knn.families import ALGORITHMS, DEFAULT_ALGORITHM
from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.knn.thermo.plan import DistanceChoice
from petlab.dask_cluster import add_cluster_arguments, spec_from_args
from petlab.server.common.admission import ServiceLimits
from petlab.server.common.environment import add_env_option, add_env_switch, env
from petlab.server.knn.datasets import BUNDLED


def add_knn_arguments(serve: argparse._ActionsContainer) -> None:
    serve.add_argument(
        "--model",
        action="append",
        default=None,
        help=f"a model to host: {', '.join(BUNDLED)}, or NAME=FILE.csv; repeatable "
        "[env PETLAB_MODEL, comma-separated]",
    )
    add_env_option(serve, "--label-column", str, "label", "the label column of CSV models")
    serve.add_argument(
        "--bounds",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="public per-feature ranges of model NAME (CSV: feature,low,high); required for CSV models; "
        "repeatable [env PETLAB_BOUNDS, comma-separated]",
    )
    add_env_option(
        serve, "--n", _points, 40, "training points kept per model ('all': the whole training set)"
    )
    add_env_option(serve, "--k", int, 3, "neighbours")
    add_env_option(serve, "--bits", int, 4, "bits per quantized feature")
    serve.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=env("ALGORITHM", DEFAULT_ALGORITHM),
        help="encrypted k-NN circuit family [env PETLAB_ALGORITHM]",
    )
    add_env_option(
        serve,
        "--distance",
        str,
        "",
        "thermo family: the distance SCALE,CAP[,LOOKUP_BITS] (crypto.knn.thermo.plan.DistanceChoice; "
        "default: from d and bits)",
    )
    add_env_option(serve, "--key-idle-hours", float, 24.0, "registered keys unused this long expire")
    add_env_option(
        serve,
        "--key-cap-mb",
        float,
        None,
        "all stored keys together, MiB (default: --key-owners x --owner-max-keys x the largest "
        "model's key set)",
    )
    add_env_option(
        serve,
        "--key-owners",
        int,
        16,
        "owners the default key caps make room for, each with --owner-max-keys key sets",
    )
    add_env_option(
        serve,
        "--upload-slots",
        int,
        2,
        "concurrent key uploads; more are refused at once (RESOURCE_EXHAUSTED)",
    )
    add_env_option(
        serve,
        "--evaluation-slots",
        int,
        3,
        "threads for classifications: running, queued for the model, or waiting for a fair share "
        "(--evaluation-waiting of them); shared fairly between callers",
    )
    add_env_option(
        serve,
        "--evaluation-waiting",
        int,
        1,
        "of --evaluation-slots, places where a caller under its fair share waits for another to "
        "end (0: none, such callers are refused at once)",
    )
    add_env_option(
        serve,
        "--evaluation-wait-seconds",
        float,
        30.0,
        "longest wait for an evaluation slot; then RESOURCE_EXHAUSTED with a retry hint",
    )
    add_env_option(
        serve, "--upload-first-chunk-seconds", float, 10.0, "an upload with no chunk by then is cancelled"
    )
    add_env_option(
        serve, "--upload-min-kib-per-second", float, 256.0, "slower uploads are cancelled after a 10 s grace"
    )
    add_env_switch(
        serve,
        "--enable-paillier-baseline",
        "also serve the interactive Paillier baseline; it reveals distances and labels, so a caller "
        "can reconstruct the training set (experiments only)",
    )
    add_cluster_arguments(serve)  # --cluster ADDRESS | --local-workers N: evaluations on Dask
    add_env_option(
        serve,
        "--partitions",
        int,
        0,
        "split one query's work over this many partitions of each training set (crypto.knn.split); "
        "0: one per cluster worker with --cluster/--local-workers, else 1 (the whole circuit in process)",
    )


def knn_options(args: argparse.Namespace) -> dict[str, Any]:
    """The k-NN room's fields of ``server.app.ServerOptions``; ``ValueError`` for a bad combination."""
    bounds = {}
    for item in args.bounds or [b for b in str(env("BOUNDS", "")).split(",") if b]:
        name, _, path = item.partition("=")
        if not name or not path:
            raise ValueError(f"--bounds takes NAME=FILE, got {item!r}")
        bounds[name] = Path(path)
    return {
        "models": args.model or [m for m in str(env("MODEL", "")).split(",") if m],
        "settings": KnnSettings(
            n=args.n,
            k=args.k,
            bits=args.bits,
            algorithm=args.algorithm,
            distance=DistanceChoice.parse(args.distance) if args.distance else None,
        ),
        "label_column": args.label_column,
        "bounds": bounds,
        "key_idle_seconds": args.key_idle_hours * 3600,
        "key_cap_bytes": None if args.key_cap_mb is None else int(args.key_cap_mb * (1 << 20)),
        "key_owners": args.key_owners,
        "enable_paillier_baseline": args.enable_paillier_baseline,
        "cluster": spec_from_args(args),
        "partitions": args.partitions,
        "limits": ServiceLimits(
            upload_slots=args.upload_slots,
            evaluation_slots=args.evaluation_slots,
            evaluation_waiting=args.evaluation_waiting,
            evaluation_wait_seconds=args.evaluation_wait_seconds,
            first_chunk_seconds=args.upload_first_chunk_seconds,
            min_bytes_per_second=args.upload_min_kib_per_second * 1024,
            owner_upload_slots=args.owner_upload_slots,
            owner_evaluation_slots=args.owner_evaluation_slots,
        ),
    }


def _points(text: str) -> int | None:
    """``--n``: a number of training points, or ``all`` (None: the whole training set)."""
    if text == "all":
        return None
    return int(text)  # ValueError: argparse reports an invalid --n value
