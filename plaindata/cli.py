"""``petlab-synth``: plain-data release tools.

petlab-synth commute-data --workers 100000 --seed 1 --out commute/
petlab-synth onthemap --od commute/od_main_JT00.csv.gz --xwalk commute/xwalk.csv.gz \
    --eps 4.6 --delta 1e-5 --out synthetic.csv.gz
petlab-synth onthemap --od ... --xwalk ... --local-workers 2 --out synthetic-parts/   # or --cluster ADDRESS
petlab-synth adaptive --od commute/od_main_JT00.csv.gz --xwalk commute/xwalk.csv.gz \
    --method improved --eps 1 --out adaptive.csv.gz
petlab-synth plausible --data acs13.csv --k 50 --gamma 4 --omega 9 --eps0 1 --count 1000 \
    --out synthetic.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from petlab.dask_cluster import add_cluster_arguments, spec_from_args
from petlab.plaindata.diagnostics import write_diagnostics
from petlab.plaindata.secure_random import release_generator

DIAGNOSTICS_HELP = (
    "write figures computed from the confidential data (not covered by the privacy statement) to this "
    "owner-only JSON file; they are never printed"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="petlab-synth", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commute = commands.add_parser("commute-data", help="write seeded LODES-style commute data")
    commute.add_argument("--workers", type=int, required=True)
    commute.add_argument("--seed", type=int, default=0)
    commute.add_argument("--out", type=Path, required=True, help="directory for the O/D file and crosswalk")
    onthemap = commands.add_parser("onthemap", help="OnTheMap PDP synthesizer (ICDE 2008 Algorithms 1-2)")
    adaptive = commands.add_parser("adaptive", help="adaptive histograms / direct synthesis on O/D pairs")
    for command in (onthemap, adaptive):
        command.add_argument(
            "--od", type=Path, required=True, help="LODES O/D file (w_geocode,h_geocode,S000)"
        )
        command.add_argument("--xwalk", type=Path, required=True, help="crosswalk with blklatdd, blklondd")
        command.add_argument("--out", type=Path, required=True, help="synthetic O/D file (.csv or .csv.gz)")
        command.add_argument("--seed", type=int, help="seed for a reproducible run (NOT for release)")
        command.add_argument("--diagnostics", type=Path, help=DIAGNOSTICS_HELP)
    onthemap.add_argument("--eps", type=float, default=4.6)
    onthemap.add_argument("--delta", type=float, default=1e-5)
    onthemap.add_argument("--cell-miles", type=float, default=1.0, help="grid cell for distance bands")
    add_cluster_arguments(onthemap)  # --cluster / --local-workers: --out is then a Parquet directory
    onthemap.add_argument("--partitions", type=int, help="with a cluster: default twice its workers")
    adaptive.add_argument("--method", choices=["basic", "improved", "direct"], default="improved")
    adaptive.add_argument("--eps", type=float, default=1.0, help="epsilon per noisy count (see the report)")
    adaptive.add_argument(
        "--threshold", type=float, default=None, help="split threshold b (default ln16/eps+1)"
    )
    adaptive.add_argument("--depth", type=int, default=12, help="max depth (basic, direct)")
    _add_plausible(commands)
    args = parser.parse_args(argv)
    if args.command == "plausible":
        try:
            return _plausible(args)
        except (OSError, ValueError) as error:
            print(f"petlab-synth: error: {error}", file=sys.stderr)
            return 2
    if args.command in ("onthemap", "adaptive"):
        try:
            return _synthesize(args)
        except (OSError, ValueError, RuntimeError) as error:
            print(f"petlab-synth: error: {error}", file=sys.stderr)
            return 2

    if args.command == "commute-data":
        from petlab.plaindata.onthemap.commute_data import generate, load_lodes

        if args.workers < 1:
            parser.error("--workers must be at least 1")
        data = generate(args.workers, args.seed, show_progress=args.workers >= 100_000)
        od_path, crosswalk_path = data.write(args.out)
        frame = load_lodes(od_path, crosswalk_path)
        miles = np.repeat(frame.miles.to_numpy(), frame.S000.to_numpy())
        quartiles = ", ".join(
            f"{q}%: {v:.1f}"
            for q, v in zip((50, 75, 90, 99), np.percentile(miles, [50, 75, 90, 99]), strict=True)
        )
        print(
            f"wrote {od_path} ({len(frame)} O/D pairs, {args.workers} workers) and {crosswalk_path} "
            f"({len(data.crosswalk)} blocks); commute miles {quartiles}"
        )
    return 0


def _synthesize(args) -> int:
    import pandas as pd

    from petlab.plaindata.onthemap.commute_data import load_lodes

    if not args.eps > 0:
        raise ValueError("--eps must be positive")
    frame = load_lodes(args.od, args.xwalk)
    crosswalk = pd.read_csv(args.xwalk, dtype=str)
    block_column = next(c for c in ("tabblk2010", "tabblk2020") if c in crosswalk.columns)
    blocks = pd.Index(crosswalk[block_column])
    latitude, longitude = (
        crosswalk.blklatdd.astype(float).to_numpy(),
        crosswalk.blklondd.astype(float).to_numpy(),
    )
    destination = blocks.get_indexer(frame.w_geocode)
    origin = blocks.get_indexer(frame.h_geocode)
    count = frame.S000.to_numpy()
    seeded = args.seed is not None
    rng = release_generator(args.seed)  # ChaCha20 from os.urandom when unseeded
    spec = spec_from_args(args) if args.command == "onthemap" else None
    if spec is not None and spec.enabled:
        from petlab.plaindata.onthemap.distributed_release import run_command

        report = run_command(args, spec, destination, origin, count, blocks, latitude, longitude)
        if seeded:
            report.append("seeded run: reproducible randomness, NOT for release")
        print("privacy report:\n  " + "\n  ".join(report))
        return 0
    if args.command == "onthemap":
        from petlab.plaindata.onthemap.block_grid import BlockGrid
        from petlab.plaindata.onthemap.release import release

        grid = BlockGrid.build(latitude, longitude, args.cell_miles)
        result = release(
            destination,
            origin,
            count,
            grid,
            args.eps,
            args.delta,
            cell_miles=args.cell_miles,
            rng=rng,
            show_progress=True,
        )
        out_d, out_o, out_c = result.destination, result.origin, result.count
        report = list(result.privacy.lines())
        diagnostics = dict(result.stats)
    else:
        diagnostics = {}
        out_d, out_o, out_c, report = _adaptive(
            args, destination, origin, count, latitude, longitude, rng, seeded
        )
    synthetic = pd.DataFrame({"w_geocode": blocks[out_d], "h_geocode": blocks[out_o], "S000": out_c})
    synthetic = synthetic.groupby(["w_geocode", "h_geocode"], as_index=False).S000.sum()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    synthetic.to_csv(args.out, index=False)
    print(f"wrote {args.out}: {len(synthetic)} O/D pairs, {int(synthetic.S000.sum())} workers")
    if args.diagnostics and diagnostics:
        write_diagnostics(args.diagnostics, diagnostics)
        print(f"confidential diagnostics (not for release) in {args.diagnostics}")
    if seeded:
        report.append("seeded run: reproducible randomness, NOT for release")
    print("privacy report:\n  " + "\n  ".join(report))
    return 0


def _add_plausible(commands) -> None:
    plausible = commands.add_parser(
        "plausible", help="plausible-deniability synthesis of person records (VLDB 2017)"
    )
    plausible.add_argument("--data", type=Path, help="input CSV (default: the shipped ACS 2013 sample)")
    plausible.add_argument(
        "--domains", type=Path, help="public domains, one attribute a line (default: the ACS domains)"
    )
    plausible.add_argument("--count", type=int, required=True, help="synthetic records to release")
    plausible.add_argument("--out", type=Path, required=True, help="output CSV")
    plausible.add_argument("--k", type=int, default=50)
    plausible.add_argument("--gamma", type=float, default=4.0)
    plausible.add_argument("--omega", type=int, default=9, help="attributes resampled from each seed")
    plausible.add_argument("--eps0", type=float, default=1.0, help="Privacy Test 2's noise (Laplace 1/eps0)")
    plausible.add_argument("--test", type=int, choices=[1, 2], default=2, help="Privacy Test 1 or 2")
    plausible.add_argument(
        "--t", type=int, help="Theorem 1's t (default: smallest eps with delta <= model delta)"
    )
    plausible.add_argument("--model-eps", type=float, default=1.0, help="DP budget of the generative model")
    plausible.add_argument("--model-delta", type=float, default=2.0**-30)
    plausible.add_argument("--max-cost", type=int, default=2000, help="cells per conditional table (eq. 6)")
    plausible.add_argument("--max-plausible", type=int)
    plausible.add_argument("--max-check-plausible", type=int)
    plausible.add_argument("--max-candidates", type=int, help="give up after this many (default 100 x count)")
    plausible.add_argument("--seed", type=int, help="seed for a reproducible run (NOT for release)")
    plausible.add_argument("--diagnostics", type=Path, help=DIAGNOSTICS_HELP)


def _plausible(args) -> int:
    import pandas as pd

    from petlab.plaindata import acs_sample_path
    from petlab.plaindata.dp.noise import OpenDPNoise, SeededNoise
    from petlab.plaindata.plausible.synthesis import PlausibleConfig, PlausiblePrivacyReport, fit, synthesize
    from petlab.plaindata.plausible.tabular_schema import acs_discretization, acs_domains_path, load_domains

    data_path = args.data or acs_sample_path()
    frame = pd.read_csv(data_path)
    schema = load_domains(args.domains or acs_domains_path())
    if args.domains is None and set(frame.columns) != set(schema.names):
        raise ValueError(
            f"{data_path} does not have the ACS attributes; give its public domains with --domains"
        )
    if args.count < 1:
        raise ValueError("--count must be at least 1")
    config = PlausibleConfig(
        k=args.k,
        gamma=args.gamma,
        omega=args.omega,
        eps0=args.eps0 if args.test == 2 else None,
        t=args.t,
        model_epsilon=args.model_eps,
        model_delta=args.model_delta,
        max_cost=args.max_cost,
        max_plausible=args.max_plausible,
        max_check_plausible=args.max_check_plausible,
    )
    codes = schema.encode(frame)
    seeded = args.seed is not None
    rng = release_generator(args.seed)  # ChaCha20 from os.urandom when unseeded
    noise = SeededNoise(args.seed) if seeded else OpenDPNoise()
    print(f"learning the model from {len(codes)} records of {data_path} ...", file=sys.stderr)
    fitted = fit(codes, schema.cardinalities, acs_discretization(schema), config, rng, noise)
    run = synthesize(fitted, args.count, config, rng, noise, args.max_candidates, show_progress=True)
    if args.diagnostics:
        write_diagnostics(
            args.diagnostics,
            {"candidates": run.candidates, "passed": len(run.records), "pass_rate": run.pass_rate},
        )
    if len(run.records) < args.count:
        # Theorem 1 covers each released record, not the event "fewer passed than asked": release
        # nothing rather than a count that depends on the data (issue 16).
        print(
            "petlab-synth: the candidate budget (--max-candidates) ran out before --count records passed "
            "the privacy test; nothing was released",
            file=sys.stderr,
        )
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    schema.decode(run.records)[list(frame.columns)].to_csv(args.out, index=False)
    order = " -> ".join(schema.names[i] for i in fitted.model.order)
    kept = ", ".join(schema.names[i] for i in fitted.model.kept(config.omega)) or "none"
    print(
        f"wrote {args.out}: {len(run.records)} records; dependency order {order}; kept from the seed: {kept}"
    )
    report = PlausiblePrivacyReport.of(fitted, config, len(run.records)).lines()
    if seeded:
        report.append("seeded run: reproducible randomness, NOT for release")
    print("privacy report:\n  " + "\n  ".join(report))
    return 0


def _adaptive(args, destination, origin, count, latitude, longitude, rng, seeded):
    """Workers as points of [0, 1]^4 (home lat/lon, work lat/lon; Section 5.1), synthesized,
    then snapped back to the nearest blocks (public geography: post-processing)."""
    from scipy.spatial import cKDTree

    from petlab.plaindata.adaptive import histograms as adaptive
    from petlab.plaindata.adaptive.hierarchies import Quadtree
    from petlab.plaindata.dp.accounting import report_lines
    from petlab.plaindata.dp.noise import OpenDPNoise, SeededNoise
    from petlab.plaindata.metrics.commute import to_unit_cube

    noise = SeededNoise(args.seed) if seeded else OpenDPNoise()
    low, high = np.array([latitude.min(), longitude.min()]), np.array([latitude.max(), longitude.max()])
    coordinates = np.column_stack([latitude, longitude])
    unit = to_unit_cube(coordinates, low, high)
    points = np.hstack([unit[np.repeat(origin, count)], unit[np.repeat(destination, count)]])
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
    report = report_lines(costs)
    index = cKDTree(unit)
    _, home = index.query(synthetic[:, :2])
    _, work = index.query(synthetic[:, 2:])
    return work, home, np.ones(len(home), dtype=np.int64), report


if __name__ == "__main__":
    sys.exit(main())
