"""``petlab-experiments``: the demo and the benchmarks."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

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
    local.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="compile cache (default $PETLAB_CACHE_DIR or ~/.cache/petlab/models)",
    )

    bench = commands.add_parser("knn-bench", help="HE-kNN-V cost figures against n, as CSV")
    bench.add_argument("--n", type=int, nargs="+", default=[10, 20, 40], help="values of n")
    bench.add_argument("--queries", type=int, default=5, help="encrypted queries per n (default 5)")
    bench.add_argument("--out", type=Path, default=Path("results/knn_bench.csv"))
    bench.add_argument("--sign-bits", type=int, default=CircuitConfig.sign_bits)
    bench.add_argument("--global-p-error", type=float, default=CircuitConfig.global_p_error)
    bench.add_argument("--strategy", choices=["multi", "mono"], default="multi")

    synth = commands.add_parser("onthemap-bench", help="OnTheMap release at state scale: time and memory")
    synth.add_argument("--workers", type=int, default=1_500_000, help="workers (~ O/D pairs; default 1.5M)")
    synth.add_argument("--blocks", type=int, default=233_726, help="blocks in the state (default 233,726)")
    synth.add_argument("--seed", type=int, default=1)
    synth.add_argument("--out", type=Path, default=Path("results/onthemap_bench.csv"))

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
        from petlab.experiments import local_demo

        return local_demo.run_demo(args.rows, KnnSettings(n=args.n, k=args.k), args.cache_dir)
    if args.command == "knn-bench":
        from petlab.experiments import knn_bench

        circuit = CircuitConfig(
            sign_bits=args.sign_bits,
            global_p_error=args.global_p_error,
            parameter_selection_strategy=args.strategy,
        )
        return knn_bench.run_bench(args.n, args.queries, args.out, circuit)
    if args.command == "onthemap-bench":
        from petlab.experiments import onthemap_bench

        return onthemap_bench.run_bench(args.workers, args.blocks, args.seed, args.out)
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
        config = PlausibleConfig(k=args.k, gamma=args.gamma, omega=args.omega, eps0=args.eps0)
        return plausible_bench.run_bench(data, args.candidates, config, args.seed, args.out)
    return 2


if __name__ == "__main__":
    sys.exit(main())
