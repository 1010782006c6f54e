"""Commute (origin-destination) data: a LEHD LODES loader and a seeded generator.

Loader. LODES origin-destination files are gzipped CSVs with ``w_geocode`` (workplace block, the
destination), ``h_geocode`` (residence block, the origin) and ``S000`` (number of jobs), plus
breakdown columns this project ignores. The block crosswalk gives each block's internal point as
``blklatdd, blklondd`` (its block column is ``tabblk2010`` in LODES 7 and ``tabblk2020`` in
LODES 8). :func:`load_lodes` joins both ends of every pair to their coordinates.

Generator. :func:`generate` makes realistic, sparse commute data of any size from a seeded gravity
model: blocks are scattered around towns of Pareto-distributed sizes; jobs concentrate in towns'
centres; each worker's home is drawn by first choosing a town with probability proportional to its
population times exp(-distance / ``decay_miles``) (or, for a ``long_distance_share`` of workers, to
its population alone), then a block of that town: most commutes are short, a few cross the state (a
heavy tail), and the O/D matrix is sparse. With the defaults the commute distances are of the order
of the Minnesota figures in the ICDE 2008 paper (Section VI: half under 6.2 miles, 90 % under 21.5;
seed 1 gives 8.2 and 15.3). The cost is linear in the number of workers and in towns x destination
blocks, never quadratic in blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from petlab.progress import bar

EARTH_RADIUS_MILES = 3958.8
BLOCK_COLUMNS = ("tabblk2010", "tabblk2020")


def haversine_miles(lat1, lon1, lat2, lon2) -> np.ndarray:
    lat1, lon1, lat2, lon2 = (np.radians(np.asarray(v, dtype=float)) for v in (lat1, lon1, lat2, lon2))
    a = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 2 * EARTH_RADIUS_MILES * np.arcsin(np.sqrt(np.clip(a, 0, 1)))


MAX_JOBS = 2**53  # counts above this are not exact in floating point, and no block has them


def _job_counts(column: pd.Series, od_path: Path) -> pd.Series:
    """``S000`` as int64, every count a whole number in 1 .. ``MAX_JOBS``. The error names neither
    the value nor its row: both are figures of the confidential O/D file (a parser's own message
    quotes the value)."""
    values = pd.to_numeric(column, errors="coerce").astype(float)
    valid = np.isfinite(values) & (values >= 1) & (values <= MAX_JOBS) & (values == np.floor(values))
    if not valid.all():
        raise ValueError(
            f"{od_path}: S000 must be a positive whole number of jobs on every row "
            "(the values and rows are not named: they are confidential)"
        )
    return values.astype(np.int64)


def load_lodes(od_path: Path, crosswalk_path: Path) -> pd.DataFrame:
    """O/D pairs with coordinates: w_geocode, h_geocode, S000, w_lat, w_lon, h_lat, h_lon, miles."""
    od = pd.read_csv(od_path, dtype={"w_geocode": str, "h_geocode": str})
    missing = {"w_geocode", "h_geocode", "S000"} - set(od.columns)
    if missing:
        raise ValueError(f"{od_path}: not a LODES O/D file, missing columns {sorted(missing)}")
    od["S000"] = _job_counts(od.S000, od_path)
    crosswalk = pd.read_csv(crosswalk_path, dtype={c: str for c in BLOCK_COLUMNS})
    block = next((c for c in BLOCK_COLUMNS if c in crosswalk.columns), None)
    if block is None or not {"blklatdd", "blklondd"} <= set(crosswalk.columns):
        raise ValueError(
            f"{crosswalk_path}: needs a block column ({' or '.join(BLOCK_COLUMNS)}), blklatdd and blklondd"
        )
    points = crosswalk.set_index(block)[["blklatdd", "blklondd"]]
    if not (od.w_geocode.isin(points.index).all() and od.h_geocode.isin(points.index).all()):
        # neither the blocks nor how many: both are figures of the confidential O/D file
        raise ValueError(f"{od_path}: some blocks of the O/D file are not in the crosswalk {crosswalk_path}")
    frame = od[["w_geocode", "h_geocode", "S000"]].copy()
    frame[["w_lat", "w_lon"]] = points.loc[frame.w_geocode].to_numpy()
    frame[["h_lat", "h_lon"]] = points.loc[frame.h_geocode].to_numpy()
    frame["miles"] = haversine_miles(frame.w_lat, frame.w_lon, frame.h_lat, frame.h_lon)
    return frame


@dataclass(frozen=True)
class CommuteData:
    od: pd.DataFrame  # w_geocode, h_geocode, S000 (LODES layout)
    crosswalk: pd.DataFrame  # tabblk2010, blklatdd, blklondd

    def write(self, directory: Path) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        od_path, crosswalk_path = directory / "od_main_JT00.csv.gz", directory / "xwalk.csv.gz"
        self.od.to_csv(od_path, index=False, compression="gzip")
        self.crosswalk.to_csv(crosswalk_path, index=False, compression="gzip")
        return od_path, crosswalk_path


def generate(
    workers: int,
    seed: int = 0,
    towns: int | None = None,
    blocks_per_worker: float = 0.5,
    decay_miles: float = 8.0,
    state_miles: float = 300.0,
    long_distance_share: float = 0.02,
    show_progress: bool = False,
) -> CommuteData:
    """Seeded synthetic commute data with ``workers`` jobs (module docstring)."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    rng = np.random.default_rng(seed)
    towns = towns or max(3, int(np.sqrt(workers) / 4))
    n_blocks = max(towns * 4, int(workers * blocks_per_worker))
    sizes = rng.pareto(1.2, towns) + 1
    centres = rng.uniform(0, state_miles, size=(towns, 2))
    town_of_block = rng.choice(towns, size=n_blocks, p=sizes / sizes.sum())
    spread = sizes[town_of_block] ** 0.25  # miles: a metro of size 1000 spreads ~5.6 miles
    xy = centres[town_of_block] + rng.normal(0, 1, size=(n_blocks, 2)) * spread[:, None]
    lat0, lon0 = 44.0, -94.0  # a Minnesota-like origin, as in the ICDE 2008 paper's Section VI
    lat = lat0 + xy[:, 1] / 69.0
    lon = lon0 + xy[:, 0] / (69.0 * np.cos(np.radians(lat0)))
    ids = np.array([f"27{i:013d}" for i in range(n_blocks)])

    # jobs: blocks near their town's centre get more (business districts)
    centrality = np.exp(-np.linalg.norm(xy - centres[town_of_block], axis=1) / (spread + 1e-9))
    job_weight = centrality * sizes[town_of_block] * rng.lognormal(0, 1, n_blocks)
    destinations = rng.choice(n_blocks, size=workers, p=job_weight / job_weight.sum())
    destination_blocks, per_destination = np.unique(destinations, return_counts=True)

    members = [np.flatnonzero(town_of_block == t) for t in range(towns)]
    populated = np.array([len(m) > 0 for m in members], dtype=float)
    homes = np.empty(workers, dtype=np.int64)
    position = 0
    pairs = zip(destination_blocks, per_destination, strict=True)
    for block, count in bar(
        pairs, total=len(destination_blocks), desc="destinations", disable=not show_progress
    ):
        distance = np.linalg.norm(centres - xy[block], axis=1)
        weights = populated * sizes * (np.exp(-distance / decay_miles) + 1e-12)
        chosen_towns = rng.choice(towns, size=count, p=weights / weights.sum())
        far = rng.random(count) < long_distance_share  # the heavy tail: state-wide commuters
        if far.any():
            anywhere = populated * sizes
            chosen_towns[far] = rng.choice(towns, size=int(far.sum()), p=anywhere / anywhere.sum())
        for town, k in zip(*np.unique(chosen_towns, return_counts=True), strict=True):
            homes[position : position + k] = rng.choice(members[town], size=k)
            position += k
    destination_of_worker = np.repeat(destination_blocks, per_destination)
    od = (
        pd.DataFrame({"w_geocode": ids[destination_of_worker], "h_geocode": ids[homes]})
        .groupby(["w_geocode", "h_geocode"])
        .size()
        .rename("S000")
        .reset_index()
    )
    crosswalk = pd.DataFrame({"tabblk2010": ids, "blklatdd": lat.round(7), "blklondd": lon.round(7)})
    return CommuteData(od, crosswalk)
