"""``petlab-synth onthemap``: the OnTheMap release (ICDE 2008 Algorithms 1-2 with the beyond cell,
:mod:`petlab.plaindata.onthemap.release`), in one process or on a Dask cluster.

It prints the synthetic file's own figures (pairs and workers written: part of the release) and the
privacy statement, a function of public figures only; everything computed from the input goes to
``--diagnostics``."""

from __future__ import annotations

import argparse

import numpy as np

from petlab.dask_cluster import ClusterSpec, DaskCluster, add_cluster_arguments, spec_from_args
from petlab.errors import BadInput, reading_input
from petlab.plaindata.commands.common import (
    Commutes,
    add_lodes_arguments,
    load_commutes,
    print_report,
    save_diagnostics,
    write_od,
)
from petlab.plaindata.onthemap.block_grid import BlockGrid
from petlab.plaindata.onthemap.distributed_release import ReleaseSettings, release_on_cluster
from petlab.plaindata.onthemap.release import release
from petlab.plaindata.secure_random import release_generator


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_lodes_arguments(parser)
    parser.add_argument("--eps", type=float, default=4.6, help="the release's privacy parameter epsilon")
    parser.add_argument("--delta", type=float, default=1e-5, help="the release's privacy parameter delta")
    parser.add_argument("--cell-miles", type=float, default=1.0, help="grid cell for distance bands")
    add_cluster_arguments(parser)  # --cluster / --local-workers: --out is then a Parquet directory
    parser.add_argument("--partitions", type=int, help="with a cluster: default twice its workers")


def run(args: argparse.Namespace) -> int:
    if not args.eps > 0:
        raise BadInput("--eps must be positive")
    with reading_input():
        commutes = load_commutes(args.od, args.xwalk)
    spec = spec_from_args(args)
    if spec.enabled:
        return _on_cluster(args, spec, commutes)
    grid = BlockGrid.build(commutes.latitude, commutes.longitude, args.cell_miles)
    result = release(
        commutes.destination,
        commutes.origin,
        commutes.count,
        grid,
        args.eps,
        args.delta,
        cell_miles=args.cell_miles,
        rng=release_generator(args.seed),  # ChaCha20 from os.urandom when unseeded
        show_progress=True,
    )
    synthetic = write_od(args.out, commutes.blocks, result.destination, result.origin, result.count)
    print(f"wrote {args.out}: {len(synthetic)} O/D pairs, {int(synthetic.S000.sum())} workers")
    save_diagnostics(args.diagnostics, result.stats.as_dict())
    print_report(result.privacy.lines(), args.seed is not None)
    return 0


def _on_cluster(args: argparse.Namespace, spec: ClusterSpec, commutes: Commutes) -> int:
    """``--cluster ADDRESS | --local-workers N``: Parquet parts in the directory ``--out``."""
    if str(args.out).endswith((".csv", ".csv.gz", ".gz")):
        raise BadInput(f"with a cluster, --out is a directory for Parquet parts, not a file: {args.out}")
    grid = BlockGrid.build(commutes.latitude, commutes.longitude, args.cell_miles)
    settings = ReleaseSettings(args.eps, args.delta, cell_miles=args.cell_miles)
    with DaskCluster.start(spec) as cluster:
        print(f"releasing on the {spec.describe()} ({cluster.worker_count()} workers)", flush=True)
        result = release_on_cluster(
            cluster.client,
            commutes.destination,
            commutes.origin,
            commutes.count,
            grid,
            np.asarray(commutes.blocks, dtype=object),
            settings,
            args.out,
            partitions=args.partitions,
            seed=args.seed,
        )
    print(
        f"wrote {args.out}/: {len(result.paths)} Parquet parts, {result.synthetic_pairs} O/D pairs, "
        f"{result.synthetic_workers} workers"
    )
    save_diagnostics(args.diagnostics, {**result.stats.as_dict(), "partitions": result.partitions})
    print_report(result.privacy.lines(), args.seed is not None)
    return 0
