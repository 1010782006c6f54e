"""``petlab-synth``: plain-data release tools.

petlab-synth commute-data --workers 100000 --seed 1 --out commute/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="petlab-synth", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commute = commands.add_parser("commute-data", help="write seeded LODES-style commute data")
    commute.add_argument("--workers", type=int, required=True)
    commute.add_argument("--seed", type=int, default=0)
    commute.add_argument("--out", type=Path, required=True, help="directory for the O/D file and crosswalk")
    args = parser.parse_args(argv)

    if args.command == "commute-data":
        from plaindata.commute_data import generate, load_lodes

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


if __name__ == "__main__":
    sys.exit(main())
