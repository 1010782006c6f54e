"""OnTheMap release at state scale (1.5 million O/D pairs, origin domains up to 233,726
blocks, PDP eps = 4.6, delta = 1e-5; target under 60 s and 4 GB on this machine).

The release runs as ``petlab-synth onthemap`` in a child process, so its wall time and peak
resident memory are the command's own (reading the files included). The baseline, measured in
the same run, is the textbook dense Algorithm 1 (one Dirichlet over the whole origin domain per
destination) timed on a sample of destinations and scaled to all of them: the ratio is what the
sparse form buys.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from petlab.plaindata.onthemap.algorithm1 import synthesize_destination_dense
from petlab.plaindata.onthemap.commute_data import generate


def run_bench(workers: int, blocks: int, seed: int, out: Path) -> int:
    print(f"generating {workers} workers over {blocks} blocks (seed {seed}) ...", flush=True)
    data = generate(workers, seed, blocks_per_worker=blocks / workers, show_progress=True)
    with tempfile.TemporaryDirectory() as scratch:
        od_path, crosswalk_path = data.write(Path(scratch))
        synthetic = Path(scratch) / "synthetic.csv.gz"
        command = [
            sys.executable, "-m", "petlab.plaindata.cli", "onthemap", "--od", str(od_path), "--xwalk",
            str(crosswalk_path), "--eps", "4.6", "--delta", "1e-5", "--out", str(synthetic),
            "--seed", str(seed),
        ]  # fmt: skip
        start = time.perf_counter()
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if completed.returncode:
            print(completed.stderr, file=sys.stderr)
            return completed.returncode
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(completed.stdout)
    statement = release_statement(completed.stdout)

    destinations = data.od.groupby("w_geocode").S000.sum().to_numpy()
    rng = np.random.default_rng(seed)
    sample = rng.choice(destinations, size=min(50, len(destinations)), replace=False)
    dense_start = time.perf_counter()
    for n in sample:
        counts = np.zeros(blocks)
        counts[: int(n)] = 1
        synthesize_destination_dense(counts, 0.03, int(n), rng)
    dense_per_destination = (time.perf_counter() - dense_start) / len(sample)
    dense_total = dense_per_destination * len(destinations)

    row = {
        "workers": workers,
        "od_pairs": len(data.od),
        "blocks": blocks,
        "destinations": len(destinations),
        "input_epsilon": 4.6,  # the command's --eps and --delta, not the release's statement
        "input_delta": 1e-5,
        "statement": statement,
        "wall_seconds": round(wall, 2),
        "peak_rss_mb": round(peak_mb, 1),
        "dense_baseline_seconds_extrapolated": round(dense_total, 1),
        "speedup_vs_dense": round(dense_total / wall, 1),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    print(f"the release's own statement: {statement}")
    print(
        f"{row['od_pairs']} O/D pairs, {row['destinations']} destinations: {wall:.1f} s wall "
        f"(target < 60 s), peak {peak_mb:.0f} MB (target < 4096 MB); dense Algorithm 1 would take "
        f"~{dense_total:.0f} s ({row['speedup_vs_dense']}x); written to {out}"
    )
    return 0


def release_statement(stdout: str) -> str:
    """The first line of the privacy report ``petlab-synth onthemap`` printed: the release's own
    (eps', delta) and the neighbours it covers."""
    report = stdout.split("privacy report:", 1)
    if len(report) < 2 or not report[1].strip():
        raise ValueError("petlab-synth onthemap printed no privacy report")
    return report[1].strip().splitlines()[0].strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=1_500_000, help="workers (~ O/D pairs; default 1.5M)")
    parser.add_argument("--blocks", type=int, default=233_726, help="blocks in the state")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument(
        "--out", type=Path, default=Path("results/onthemap_bench.csv"), help="the CSV to write"
    )


def run(args: argparse.Namespace) -> int:
    return run_bench(args.workers, args.blocks, args.seed, args.out)
