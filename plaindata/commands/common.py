"""What the synthesis subcommands share: the LODES input, the output file, the diagnostics file
and the privacy report's printing."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from petlab.plaindata.diagnostics import write_diagnostics
from petlab.plaindata.onthemap.commute_data import BLOCK_COLUMNS, load_lodes

DIAGNOSTICS_HELP = (
    "write figures computed from the confidential data (not covered by the privacy statement) to this "
    "owner-only JSON file; they are never printed"
)
NOT_FOR_RELEASE = "seeded run: reproducible randomness, NOT for release"


@dataclass(frozen=True)
class Commutes:
    """O/D pairs as block indices into the crosswalk's blocks, and the blocks' coordinates."""

    blocks: pd.Index
    latitude: np.ndarray
    longitude: np.ndarray
    destination: np.ndarray
    origin: np.ndarray
    count: np.ndarray


def add_lodes_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--od", type=Path, required=True, help="LODES O/D file (w_geocode,h_geocode,S000)")
    parser.add_argument("--xwalk", type=Path, required=True, help="crosswalk with blklatdd, blklondd")
    parser.add_argument("--out", type=Path, required=True, help="synthetic O/D file (.csv or .csv.gz)")
    parser.add_argument("--seed", type=int, help="seed for a reproducible run (NOT for release)")
    parser.add_argument("--diagnostics", type=Path, help=DIAGNOSTICS_HELP)


def load_commutes(od: Path, xwalk: Path) -> Commutes:
    frame = load_lodes(od, xwalk)
    crosswalk = pd.read_csv(xwalk, dtype=str)
    block_column = next(c for c in BLOCK_COLUMNS if c in crosswalk.columns)
    blocks = pd.Index(crosswalk[block_column])
    return Commutes(
        blocks,
        crosswalk.blklatdd.astype(float).to_numpy(),
        crosswalk.blklondd.astype(float).to_numpy(),
        blocks.get_indexer(frame.w_geocode),
        blocks.get_indexer(frame.h_geocode),
        frame.S000.to_numpy(),
    )


def write_od(path: Path, blocks: pd.Index, destination, origin, count) -> pd.DataFrame:
    """The synthetic O/D file (LODES columns), one row per pair."""
    synthetic = pd.DataFrame({"w_geocode": blocks[destination], "h_geocode": blocks[origin], "S000": count})
    synthetic = synthetic.groupby(["w_geocode", "h_geocode"], as_index=False).S000.sum()
    path.parent.mkdir(parents=True, exist_ok=True)
    synthetic.to_csv(path, index=False)
    return synthetic


def save_diagnostics(path: Path | None, figures: dict) -> None:
    if path is not None:
        write_diagnostics(path, figures)
        print(f"confidential diagnostics (not for release) in {path}")


def print_report(lines: list[str], seeded: bool) -> None:
    report = [*lines, *([NOT_FOR_RELEASE] if seeded else [])]
    print("privacy report:\n  " + "\n  ".join(report))
