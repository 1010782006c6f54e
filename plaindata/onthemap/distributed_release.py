"""The OnTheMap release on a Dask cluster: destinations partitioned across workers.

Every step of :func:`petlab.plaindata.onthemap.release.release` acts on one destination at a time
(its domain, its prior, Algorithm 2's kept blocks, Algorithm 1 with accept/reject, the naming of
new blocks): alpha(d) is a function of the destination's own public N(d) and band sizes
(:func:`~petlab.plaindata.onthemap.release.choose_alphas`), so the privacy accounting per
destination is exactly what one process would choose, however destinations are partitioned. The
driver

1. assigns each destination to a partition by a hash of its block index (all of a destination's
   O/D pairs land in one partition), and scatters the public grid to every worker once;
2. runs the unchanged per-destination release on each partition as one task, with its own
   generator (:func:`~petlab.plaindata.secure_random.partition_generator`: ChaCha20 keyed from a
   256-bit root drawn from the operating system and the partition's number; a seeded run, for
   reproducible tests only, uses ``SeedSequence(seed, spawn_key=(partition,))``);
3. scatters each partition's pairs straight to a worker (the scheduler holds keys, not data) and
   has each task write its part, ``part-NNNNN.parquet`` (``w_geocode, h_geocode, S000``), into
   the output directory (which every worker must reach: a shared file system, or an fsspec URL
   such as ``s3://...``), and return only its priors' summary (public) and counts; the driver
   states the release's cost once (:func:`~petlab.plaindata.onthemap.statement.release_cost`).

Given alpha, destinations are independent in the single-process release as well, so the output's
law is the same (``tests/plaindata/onthemap/test_cluster_onthemap.py`` checks it against the exact law). A
lost worker's partition is sent again and recomputed with the same generator, overwriting the same part.

The input is a gzipped LODES CSV joined to the crosswalk (not splittable), so it is read and hashed
on the driver in one vectorised pass; the O/D arrays then cross to the workers once, by partition.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from petlab.plaindata.dp.privacy_cost import PrivacyCost
from petlab.plaindata.onthemap.block_grid import BlockGrid
from petlab.plaindata.onthemap.release import DistanceBands, ReleaseDiagnostics, release
from petlab.plaindata.onthemap.statement import PriorSummary, release_cost
from petlab.plaindata.secure_random import partition_generator

log = logging.getLogger(__name__)

PART_NAME = "part-{:05d}.parquet"
RETRIES = 2  # Dask's reruns of a partition's task that raised
ATTEMPTS = 3  # sends of a partition's pairs (they are lost with the worker that holds them)


@dataclass(frozen=True)
class ReleaseSettings:
    epsilon: float
    delta: float
    bands: DistanceBands = field(default_factory=DistanceBands)
    cell_miles: float = 1.0


@dataclass(frozen=True)
class PartResult:
    """What a partition's task sends back: no data, only the part's priors (public) and counts
    (confidential diagnostics, and the synthetic figures of the part it wrote)."""

    part: int
    path: str
    priors: PriorSummary
    stats: ReleaseDiagnostics
    synthetic_pairs: int
    synthetic_workers: int


@dataclass
class DistributedRelease:
    paths: list[str]
    privacy: PrivacyCost
    stats: ReleaseDiagnostics  # confidential, over every partition
    partitions: int  # that held destinations (one written part each)
    synthetic_pairs: int  # of the written release
    synthetic_workers: int
    root_entropy: int  # the SeedSequence root; a secret for a real release (it replays every draw)


def partition_of(destination: np.ndarray, partitions: int) -> np.ndarray:
    """Partition of each O/D pair: a hash of its destination block, so destinations never split."""
    hashed = pd.util.hash_array(np.asarray(destination, dtype=np.int64))
    return (hashed % np.uint64(partitions)).astype(np.int64)


def release_partition(
    part: int,
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    grid: BlockGrid,
    block_names: np.ndarray,
    settings: ReleaseSettings,
    root_entropy: int,
    secure: bool,
    out_dir: str,
) -> PartResult:
    """One partition's release (runs on a worker) of its ``(destination, origin, count)``
    ``pairs``; writes ``out_dir/part-NNNNN.parquet``."""
    destination, origin, count = pairs
    rng = partition_generator(root_entropy, part, secure)
    result = release(
        destination,
        origin,
        count,
        grid,
        settings.epsilon,
        settings.delta,
        settings.bands,
        settings.cell_miles,
        rng=rng,
    )
    frame = pd.DataFrame(
        {
            "w_geocode": block_names[result.destination],
            "h_geocode": block_names[result.origin],
            "S000": result.count,
        }
    )
    path = f"{out_dir.rstrip('/')}/{PART_NAME.format(part)}"
    frame.to_parquet(path, index=False)
    return PartResult(part, path, result.priors, result.stats, len(frame), int(result.count.sum()))


def release_on_cluster(
    client,
    destination,
    origin,
    count,
    grid: BlockGrid,
    block_names: np.ndarray,
    settings: ReleaseSettings,
    out_dir: str | Path,
    partitions: int | None = None,
    seed: int | None = None,
) -> DistributedRelease:
    """The release of :func:`~petlab.plaindata.onthemap.release.release`, destinations spread over
    the workers of ``client`` (a ``distributed.Client``), written as Parquet parts to ``out_dir``.
    ``partitions`` defaults to twice the number of workers; ``seed`` is for reproducible runs only
    (the output then also depends on ``partitions``)."""
    destination, origin, count = (np.asarray(v, dtype=np.int64) for v in (destination, origin, count))
    if not destination.shape == origin.shape == count.shape or destination.ndim != 1 or not len(destination):
        raise ValueError("destination, origin and count must be equal-length, non-empty vectors")
    if max(destination.max(), origin.max()) >= grid.blocks or min(destination.min(), origin.min()) < 0:
        raise ValueError("block indices must refer to the grid's blocks")
    if len(block_names) != grid.blocks:
        raise ValueError("one block name per grid block")
    if partitions is None:
        partitions = 2 * max(len(client.scheduler_info(n_workers=-1)["workers"]), 1)
    if partitions < 1:
        raise ValueError("at least one partition")
    root_entropy = seed if seed is not None else secrets.randbits(256)
    out = str(out_dir)
    if "://" not in out:
        Path(out).mkdir(parents=True, exist_ok=True)
        for stale in Path(out).glob("part-*.parquet"):  # parts of an earlier run would mix in
            stale.unlink()

    part = partition_of(destination, partitions)
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(partitions + 1))
    pending = {p: order[bounds[p] : bounds[p + 1]] for p in range(partitions) if bounds[p + 1] > bounds[p]}
    done = _run_partitions(
        client, pending, (destination, origin, count), grid, block_names, settings, root_entropy, seed, out
    )
    parts = [done[p] for p in sorted(done)]
    priors = PriorSummary.combine([r.priors for r in parts])
    bands = settings.bands
    return DistributedRelease(
        [r.path for r in parts],
        release_cost(settings.epsilon, settings.delta, bands.keep, bands.edges_miles[-1], priors),
        combine_diagnostics([r.stats for r in parts]),
        len(parts),
        sum(r.synthetic_pairs for r in parts),
        sum(r.synthetic_workers for r in parts),
        root_entropy,
    )


def _run_partitions(
    client,
    pending: dict[int, np.ndarray],
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    grid: BlockGrid,
    block_names: np.ndarray,
    settings: ReleaseSettings,
    root_entropy: int,
    seed: int | None,
    out: str,
) -> dict[int, PartResult]:
    """Each partition's task (``pending``: the rows of ``pairs`` per partition), sent again while
    a worker that held its pairs died (at most :data:`ATTEMPTS` sends)."""
    destination, origin, count = pairs
    done: dict[int, PartResult] = {}
    shared = None
    for attempt in range(ATTEMPTS):
        if shared is None or any(f.status != "finished" for f in shared):
            shared = client.scatter([grid, np.asarray(block_names)], broadcast=True, hash=False)
        # the pairs go straight to the workers (not through the scheduler, which keeps only keys)
        data = client.scatter(
            [(destination[rows], origin[rows], count[rows]) for rows in pending.values()], hash=False
        )
        futures = {
            p: client.submit(
                release_partition,
                p,
                part_pairs,
                *shared,
                settings,
                root_entropy,
                seed is None,
                out,
                retries=RETRIES,
                pure=False,
            )
            for p, part_pairs in zip(pending, data, strict=True)
        }
        for p, future in futures.items():
            try:
                done[p] = future.result()
            except Exception as exc:  # a worker died with the partition's scattered pairs
                if _killed_workers(exc) or attempt == ATTEMPTS - 1:
                    raise RuntimeError(f"partition {p} of the release failed: {exc}") from exc
                log.warning("partition %d failed (%s: %s); sending it again", p, type(exc).__name__, exc)
        pending = {p: rows for p, rows in pending.items() if p not in done}
        if not pending:
            break
    return done


def _killed_workers(exc: Exception) -> bool:
    """The task itself killed the workers that ran it (``distributed``'s allowed-failures)."""
    from distributed import KilledWorker

    return isinstance(exc, KilledWorker)


def combine_diagnostics(parts: list[ReleaseDiagnostics]) -> ReleaseDiagnostics:
    """One release's diagnostics from its partitions': counts add up, the largest domain and the
    most rounds are the partitions' maxima, the means are weighted by destinations."""
    destinations = sum(p.destinations for p in parts)
    weighted = max(destinations, 1)
    additive = {
        f.name: sum(getattr(p, f.name) for p in parts)
        for f in fields(ReleaseDiagnostics)
        if f.name not in ("max_domain", "rounds", "mean_kept_empty_blocks", "mean_prior_mass")
    }
    return ReleaseDiagnostics(
        **additive,
        max_domain=max(p.max_domain for p in parts),
        rounds=max(p.rounds for p in parts),
        mean_kept_empty_blocks=sum(p.mean_kept_empty_blocks * p.destinations for p in parts) / weighted,
        mean_prior_mass=sum(p.mean_prior_mass * p.destinations for p in parts) / weighted,
    )


def read_release(out_dir: str | Path) -> pd.DataFrame:
    """All parts of a partitioned release as one frame (``w_geocode, h_geocode, S000``)."""
    paths = sorted(Path(out_dir).glob("part-*.parquet"))
    if not paths:
        raise ValueError(f"no release parts in {out_dir}")
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
