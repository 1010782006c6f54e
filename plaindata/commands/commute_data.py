"""``petlab-synth commute-data``: seeded LODES-style commute data (public, simulated)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from petlab.errors import BadInput
from petlab.plaindata.onthemap.commute_data import generate, load_lodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, required=True, help="workers (jobs) in the generated data")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data")
    parser.add_argument("--out", type=Path, required=True, help="directory for the O/D file and crosswalk")


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise BadInput("--workers must be at least 1")
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
