"""``petlab-synth adaptive``: adaptive histograms or direct synthesis on O/D pairs
(:mod:`petlab.plaindata.adaptive.histograms`). Workers are points of [0, 1]^4 (home lat/lon, work
lat/lon; Section 5.1), synthesized, then snapped back to the nearest blocks (public geography:
post-processing)."""

from __future__ import annotations

import argparse

import numpy as np
from scipy.spatial import cKDTree

from petlab.errors import BadInput, reading_input
from petlab.plaindata.adaptive import histograms as adaptive
from petlab.plaindata.adaptive.hierarchies import Quadtree
from petlab.plaindata.commands.common import add_lodes_arguments, load_commutes, print_report, write_od
from petlab.plaindata.dp.composition import report_lines
from petlab.plaindata.dp.noise import OpenDPNoise, SeededNoise
from petlab.plaindata.metrics.commute import to_unit_cube
from petlab.plaindata.secure_random import release_generator

RELEASE = (
    "adaptive release (neighbours: one worker added or removed; public: the crosswalk's block "
    "coordinates, which fix the unit cube, and the parameters)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_lodes_arguments(parser)
    parser.add_argument(
        "--method",
        choices=["basic", "improved", "direct"],
        default="improved",
        help="adaptive histograms (basic or improved) or direct synthesis on the O/D pairs",
    )
    parser.add_argument("--eps", type=float, default=1.0, help="epsilon per noisy count (see the report)")
    parser.add_argument(
        "--threshold", type=float, default=None, help="split threshold b (default ln16/eps+1)"
    )
    parser.add_argument("--depth", type=int, default=12, help="max depth (basic, direct)")


def run(args: argparse.Namespace) -> int:
    if not args.eps > 0:
        raise BadInput("--eps must be positive")
    with reading_input():
        commutes = load_commutes(args.od, args.xwalk)
    seeded = args.seed is not None
    rng = release_generator(args.seed)  # ChaCha20 from os.urandom when unseeded
    noise = SeededNoise(args.seed) if seeded else OpenDPNoise()
    latitude, longitude = commutes.latitude, commutes.longitude
    low, high = np.array([latitude.min(), longitude.min()]), np.array([latitude.max(), longitude.max()])
    unit = to_unit_cube(np.column_stack([latitude, longitude]), low, high)
    points = np.hstack(
        [
            unit[np.repeat(commutes.origin, commutes.count)],
            unit[np.repeat(commutes.destination, commutes.count)],
        ]
    )
    domain = Quadtree(4)
    threshold = (
        args.threshold
        if args.threshold is not None
        else adaptive.default_threshold(args.eps, domain.branching)
    )
    if args.method == "direct":
        synthetic = adaptive.direct_synthesis(points, domain, args.eps, args.depth, rng, noise)
        costs = [adaptive.direct_synthesis_cost(args.eps, args.depth)]
    else:
        if args.method == "basic":
            tree = adaptive.basic_histogram(points, domain, args.eps, threshold, args.depth, noise)
            costs = [adaptive.basic_cost(args.eps, args.depth)]
        else:
            tree = adaptive.improved_histogram(points, domain, args.eps, threshold, noise=noise)
            costs = [adaptive.improved_cost(args.eps)]
        counts = adaptive.measure_leaves(points, domain, tree, args.eps, noise)
        synthetic = adaptive.synthesize_from_counts(domain, counts, rng)
        costs.append(adaptive.leaf_measurement_cost(args.eps))
    index = cKDTree(unit)
    _, home = index.query(synthetic[:, :2])
    _, work = index.query(synthetic[:, 2:])
    written = write_od(args.out, commutes.blocks, work, home, np.ones(len(home), dtype=np.int64))
    print(f"wrote {args.out}: {len(written)} O/D pairs, {int(written.S000.sum())} workers")
    print_report(report_lines(costs, RELEASE), seeded)
    return 0
