"""``petlab-experiments``: the demo and the benchmarks."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from petlab.crypto.knn_algorithms import ALGORITHMS
from petlab.crypto.knn_circuit import CircuitConfig
from petlab.crypto.knn_model import KnnSettings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="petlab-experiments", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="server and client processes: both protocols on Iris")
    demo.add_argument("--rows", type=int, default=3, help="held-out rows to classify (default 3)")
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".petlab-cache/demo-server"),
        help="the demo server's data directory (compile cache, keys)",
    )

    local = commands.add_parser("local-demo", help="encrypted k-NN on held-out Iris rows, in process")
    local.add_argument("--rows", type=int, default=5, help="held-out rows to classify (default 5)")
    local.add_argument("--n", type=int, default=40, help="training points kept (default 40)")
    local.add_argument("--k", type=int, default=3, help="neighbours (default 3)")
    local.add_argument("--algorithm", choices=ALGORITHMS, default="fast", help="circuit (default fast)")
    local.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="compile cache (default $PETLAB_CACHE_DIR or ~/.cache/petlab/models)",
    )

    bench = commands.add_parser(
        "knn-bench", help="encrypted k-NN cost figures against n, both algorithms, as CSV + Markdown"
    )
    bench.add_argument("--algorithm", nargs="+", choices=ALGORITHMS, default=["fast", "paper"])
    bench.add_argument("--n", type=int, nargs="+", default=[10, 20, 40], help="values of n")
    bench.add_argument("--paper-max-n", type=int, default=40, help="largest n for the paper's circuit")
    bench.add_argument("--queries", type=int, default=5, help="encrypted queries per n (default 5)")
    bench.add_argument("--out", type=Path, default=Path("results/knn_bench.csv"))
    bench.add_argument("--sign-bits", type=int, default=CircuitConfig.sign_bits)
    bench.add_argument(
        "--global-p-error", type=float, default=None, help="default: per algorithm (knn_algorithms)"
    )
    bench.add_argument(
        "--strategy", choices=["multi", "mono"], default=None, help="default: per algorithm (knn_algorithms)"
    )

    accuracy = commands.add_parser(
        "knn-accuracy", help="fast vs paper vs float k-NN accuracy at n = 40 on the four data sets"
    )
    accuracy.add_argument("--n", type=int, default=40)
    accuracy.add_argument("--k", type=int, default=3)
    accuracy.add_argument("--out", type=Path, default=Path("results/knn_accuracy.csv"))

    synth = commands.add_parser("onthemap-bench", help="OnTheMap release at state scale: time and memory")
    synth.add_argument("--workers", type=int, default=1_500_000, help="workers (~ O/D pairs; default 1.5M)")
    synth.add_argument("--blocks", type=int, default=233_726, help="blocks in the state (default 233,726)")
    synth.add_argument("--seed", type=int, default=1)
    synth.add_argument("--out", type=Path, default=Path("results/onthemap_bench.csv"))

    figures = commands.add_parser(
        "onthemap-figures", help="ICDE 2008 Figures 1-4 (200 and 100 miles) and prior mass per destination"
    )
    figures.add_argument("--workers", type=int, default=1_500_000)
    figures.add_argument("--seed", type=int, default=1)
    figures.add_argument("--sample", type=int, default=120, help="destination blocks in the figures")
    figures.add_argument("--out", type=Path, default=Path("results/onthemap_figures"))

    counts = commands.add_parser(
        "adaptive-counts", help="adaptive synthesis: synthetic against real point counts, by eps"
    )
    counts.add_argument("--workers", type=int, default=20_000)
    counts.add_argument("--seed", type=int, default=1)
    counts.add_argument("--eps", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    counts.add_argument("--out", type=Path, default=Path("results/adaptive_counts.md"))

    tables = commands.add_parser(
        "plausible-tables",
        help="plausible deniability at 100k records: the paper's Tables 3 and 5 beside ours",
    )
    tables.add_argument(
        "--data", type=Path, help="ACS CSV (default: ../shared/data/acs13.csv, else the sample)"
    )
    tables.add_argument("--k", type=int, default=50)
    tables.add_argument("--omega", type=int, nargs="+", default=[9, 11])
    tables.add_argument(
        "--per-class", type=int, default=5000, help="records per class in the distinguishing game"
    )
    tables.add_argument("--seed", type=int, default=1)
    tables.add_argument("--out", type=Path, default=Path("results/plausible_tables.md"))

    cluster = commands.add_parser(
        "cluster-bench",
        help="k-NN and OnTheMap in process vs on a LocalCluster (1, 2 workers), with the extrapolation",
    )
    cluster.add_argument("--n", type=int, nargs="*", default=[20], help="k-NN n values (none: skip k-NN)")
    cluster.add_argument("--clients", type=int, default=2, help="concurrent clients, each with its own keys")
    cluster.add_argument("--queries", type=int, default=6, help="timed queries per client and configuration")
    cluster.add_argument(
        "--synth-workers",
        type=int,
        nargs="*",
        default=[150_000, 500_000, 1_500_000],
        help="OnTheMap sizes in workers (jobs); none: skip OnTheMap",
    )
    cluster.add_argument("--blocks-per-worker", type=float, default=233_726 / 1_500_000)
    cluster.add_argument("--out", type=Path, default=Path("results"), help="directory for the CSVs and .md")
    cluster.add_argument("--cache-dir", type=Path, default=Path(".petlab-cache/models"))

    plausible = commands.add_parser(
        "plausible-bench", help="plausible-deniability synthesis: 100k candidates, records/s and pass rate"
    )
    plausible.add_argument(
        "--data",
        type=Path,
        help="ACS CSV (default $PETLAB_ACS_DATA, else ../shared/data/acs13.csv, else the shipped sample)",
    )
    plausible.add_argument("--candidates", type=int, default=100_000)
    plausible.add_argument("--k", type=int, default=50)
    plausible.add_argument("--gamma", type=float, default=4.0)
    plausible.add_argument("--omega", type=int, default=9)
    plausible.add_argument("--eps0", type=float, default=1.0)
    plausible.add_argument("--seed", type=int, default=1)
    plausible.add_argument("--out", type=Path, default=Path("results/plausible_bench.csv"))

    everything = commands.add_parser(
        "all", help="every experiment: k-NN over gRPC, sweeps, synthesis utility; CSV, Markdown, PNG"
    )
    size = everything.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="about 10 minutes on 2 cores (default)")
    size.add_argument("--full", action="store_true", help="the papers' scales (an hour or more)")
    everything.add_argument("--out", type=Path, help="results directory (default results/all-quick or -full)")
    everything.add_argument(
        "--cache-dir", type=Path, default=Path(".petlab-cache"), help="compiled circuits (reused across runs)"
    )

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        from petlab.experiments import grpc_demo

        return grpc_demo.run_demo(args.rows, args.data_dir)
    if args.command == "local-demo":
        from petlab.experiments.local_demo import run_demo

        return run_demo(args.rows, KnnSettings(n=args.n, k=args.k, algorithm=args.algorithm), args.cache_dir)
    if args.command == "knn-bench":
        from petlab.experiments.knn_bench import run_bench

        custom = args.global_p_error is not None or args.strategy is not None or args.sign_bits != 4
        config = (
            CircuitConfig(
                sign_bits=args.sign_bits,
                global_p_error=args.global_p_error or CircuitConfig.global_p_error,
                parameter_selection_strategy=args.strategy or "multi",
            )
            if custom
            else None
        )
        return run_bench(args.n, args.queries, args.out, args.algorithm, config, args.paper_max_n)
    if args.command == "knn-accuracy":
        from petlab.experiments.knn_accuracy import run_accuracy

        return run_accuracy(args.n, args.k, args.out)
    if args.command == "onthemap-bench":
        from petlab.experiments import onthemap_bench

        return onthemap_bench.run_bench(args.workers, args.blocks, args.seed, args.out)
    if args.command == "plausible-tables":
        from petlab.experiments.plausible_tables import run_tables

        return run_tables(args.data, args.k, args.omega, args.per_class, args.seed, args.out)
    if args.command == "adaptive-counts":
        from petlab.experiments.adaptive_counts import run_counts

        return run_counts(args.workers, args.seed, args.eps, args.out)
    if args.command == "onthemap-figures":
        from petlab.experiments.onthemap_figures import run_figures

        return run_figures(args.workers, args.seed, args.sample, args.out)
    if args.command == "cluster-bench":
        from petlab.experiments.cluster_bench import run_bench as run_cluster_bench

        return run_cluster_bench(
            args.n,
            args.clients,
            args.queries,
            args.synth_workers,
            args.blocks_per_worker,
            args.out,
            args.cache_dir,
        )
    if args.command == "all":
        from petlab.experiments.run_all import FULL, QUICK, run_all

        logging.getLogger().setLevel(logging.WARNING)  # the server's per-call log would drown the bar
        mode = "full" if args.full else "quick"
        run_all(FULL if args.full else QUICK, args.out or Path(f"results/all-{mode}"), args.cache_dir, mode)
        return 0
    if args.command == "plausible-bench":
        from petlab.experiments import plausible_bench
        from petlab.plaindata.plausible.synthesis import PlausibleConfig

        try:
            data = plausible_bench.existing_data(args.data) if args.data else plausible_bench.default_data()
        except FileNotFoundError as exc:
            print(f"petlab-experiments plausible-bench: {exc}", file=sys.stderr)
            return 2
        synthesis = PlausibleConfig(k=args.k, gamma=args.gamma, omega=args.omega, eps0=args.eps0)
        return plausible_bench.run_bench(data, args.candidates, synthesis, args.seed, args.out)
    return 2


if __name__ == "__main__":
    sys.exit(main())
