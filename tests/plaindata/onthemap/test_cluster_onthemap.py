"""The OnTheMap release partitioned over a real LocalCluster (2 worker processes) has the law of
the single-process release: many far-apart copies of the enumerable geography of
``test_onthemap_release`` are independent destinations, so one partitioned release gives one draw
per copy, compared with the exact law by the same chi-square statistic."""

import os
import signal
import time
from collections import Counter

import numpy as np
import pytest
from scipy import stats
from test_onthemap_release import (
    ALPHA_TEST,
    BANDS,
    X,
    Y,
    chi_square_pvalue,
    exact_release_law,
    grid_from_miles,
)

from petlab.plaindata.onthemap.distributed_release import (
    ReleaseSettings,
    partition_of,
    read_release,
    release_on_cluster,
)
from petlab.plaindata.onthemap.release import release

COPIES = 2000
SPACING_MILES = 20.0  # copies further apart than the last band (4 miles): independent destinations
EPSILON, DELTA = 1.2, 0.3
COUNTS = np.array([0, 2, 0, 1, 0, 0])  # destination 0 of each copy: 2 workers from block 1, 1 from 3


def copies_geography(copies: int):
    """Blocks of ``copies`` copies side by side along x; O/D pairs of each copy's destination."""
    x = np.concatenate([np.asarray(X) + SPACING_MILES * c for c in range(copies)])
    y = np.tile(Y, copies)
    base = np.arange(copies) * len(X)
    destination = np.repeat(base, 3)
    origin = (base[:, None] + np.array([1, 3, 6])[None, :]).ravel()
    count = np.tile([2, 1, 1], copies)
    return grid_from_miles(x, y), destination, origin, count


def outcomes(destination, origin, count) -> Counter:
    """The output of each copy's destination as the vector of counts over its six domain blocks."""
    full = np.zeros((COPIES, len(X)), dtype=int)
    np.add.at(full, (destination // len(X), origin % len(X)), count)
    assert (destination % len(X) == 0).all() and full[:, 6:].sum() == 0
    return Counter(tuple(row[:6]) for row in full)


@pytest.fixture(scope="module")
def geography():
    return copies_geography(COPIES)


def test_partitioned_release_has_the_single_process_law(local_cluster, geography, tmp_path):
    grid, destination, origin, count = geography
    names = np.array([str(i) for i in range(grid.blocks)])
    settings = ReleaseSettings(EPSILON, DELTA, BANDS)
    out = release_on_cluster(
        local_cluster.client, destination, origin, count, grid, names, settings, tmp_path, partitions=4
    )
    assert len(out.paths) == 4 and out.partitions == 4
    frame = read_release(tmp_path)
    cluster = outcomes(frame.w_geocode.astype(int), frame.h_geocode.astype(int), frame.S000.to_numpy())

    single = release(destination, origin, count, grid, EPSILON, DELTA, BANDS, rng=np.random.default_rng(5))
    assert out.privacy == single.privacy  # the accounting does not change with partitioning
    assert out.stats.workers == single.stats.workers == 4 * COPIES  # N(d), the public totals
    assert out.stats.beyond_workers == single.stats.beyond_workers == COPIES
    assert out.synthetic_workers == int(frame.S000.sum()) and out.synthetic_pairs == len(frame)

    law = exact_release_law(COUNTS, float(single.alpha[0]), np.expm1(EPSILON), keep_band_1=0.5)
    assert chi_square_pvalue(cluster, law, COPIES) > ALPHA_TEST
    # power: keeping every empty block (no Algorithm 2) is a detectably different law
    assert (
        chi_square_pvalue(
            cluster, exact_release_law(COUNTS, float(single.alpha[0]), np.expm1(EPSILON), 1.0), COPIES
        )
        < ALPHA_TEST
    )
    # and the same law as the single-process release, draw for draw counted
    local = outcomes(single.destination, single.origin, single.count)
    keys = sorted(set(cluster) | set(local))
    table = np.array([[cluster[k] for k in keys], [local[k] for k in keys]])
    assert stats.chi2_contingency(table[:, table.sum(0) > 0]).pvalue > ALPHA_TEST


def test_partitions_keep_destinations_whole_and_priors_global(geography):
    grid, destination, origin, count = geography
    part = partition_of(destination, 3)
    for d in np.unique(destination):
        assert len(set(part[destination == d].tolist())) == 1
    assert set(part.tolist()) == {0, 1, 2}
    # alpha(d) depends on the destination alone: a partition's release chooses what one process does
    single = release(destination, origin, count, grid, EPSILON, DELTA, BANDS, rng=np.random.default_rng(0))
    for p in range(3):
        rows = part == p
        alone = release(
            destination[rows],
            origin[rows],
            count[rows],
            grid,
            EPSILON,
            DELTA,
            BANDS,
            rng=np.random.default_rng(0),
        )
        assert np.array_equal(alone.alpha, single.alpha[np.isin(single.destinations, alone.destinations)])


def test_seeded_partitioned_release_is_reproducible(local_cluster, geography, tmp_path):
    grid, destination, origin, count = (v for v in geography)
    names = np.array([str(i) for i in range(grid.blocks)])
    settings = ReleaseSettings(EPSILON, DELTA, BANDS)
    runs = []
    for run in range(2):
        out = release_on_cluster(
            local_cluster.client, destination[:300], origin[:300], count[:300], grid, names, settings,
            tmp_path / str(run), partitions=3, seed=11,
        )  # fmt: skip
        assert out.root_entropy == 11
        runs.append(read_release(tmp_path / str(run)).sort_values(["w_geocode", "h_geocode"]))
    assert runs[0].reset_index(drop=True).equals(runs[1].reset_index(drop=True))
    unseeded = release_on_cluster(
        local_cluster.client, destination[:3], origin[:3], count[:3], grid, names, settings, tmp_path / "u"
    )
    assert unseeded.root_entropy.bit_length() > 64  # from the operating system's entropy


def test_synth_command_writes_parquet_parts_on_a_cluster(local_cluster, tmp_path, capsys):
    from petlab.plaindata.cli import main
    from petlab.plaindata.onthemap.commute_data import generate

    od_path, crosswalk_path = generate(800, seed=4).write(tmp_path / "commute")
    address = local_cluster.client.scheduler.address
    command = [
        "onthemap",
        "--od",
        str(od_path),
        "--xwalk",
        str(crosswalk_path),
        "--out",
        str(tmp_path / "parts"),
    ]
    assert main([*command, "--cluster", address, "--partitions", "3"]) == 0
    printed = capsys.readouterr().out
    frame = read_release(tmp_path / "parts")
    assert len(list((tmp_path / "parts").glob("part-*.parquet"))) == 3
    assert f"{len(frame)} O/D pairs, {int(frame.S000.sum())} workers" in printed
    assert "epsilon'" in printed and "seeded run" not in printed
    assert set(frame.columns) == {"w_geocode", "h_geocode", "S000"} and (frame.S000 > 0).all()
    file_out = [*command[:-1], str(tmp_path / "synthetic.csv.gz"), "--cluster", address]
    assert main(file_out) == 2 and "a directory for Parquet parts" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):  # one place to run, not two
        main([*command, "--cluster", address, "--local-workers", "2"])


class KillsAfterFirstScatterOfPairs:
    """A ``distributed.Client`` whose first scatter of partition pairs is followed by the death of
    a worker holding some of them (SIGKILL), before any task runs: those pairs are lost."""

    def __init__(self, client):
        self._client, self.killed = client, ""

    def __getattr__(self, name):
        return getattr(self._client, name)

    def scatter(self, data, **kwargs):
        futures = self._client.scatter(data, **kwargs)
        if not self.killed and not kwargs.get("broadcast"):
            holders = self._client.who_has(futures)
            self.killed = next(iter(holders[futures[0].key]))
            pid = self._client.run(os.getpid, workers=[self.killed])[self.killed]
            os.kill(pid, signal.SIGKILL)
            while self.killed in self._client.scheduler_info(n_workers=-1)["workers"]:
                time.sleep(0.05)
        return futures


def test_partitions_lost_with_a_worker_are_sent_again(local_cluster, geography, tmp_path, caplog):
    grid, destination, origin, count = geography
    names = np.array([str(i) for i in range(grid.blocks)])
    client = KillsAfterFirstScatterOfPairs(local_cluster.client)
    with caplog.at_level("WARNING", logger="petlab.plaindata.onthemap.distributed_release"):
        out = release_on_cluster(
            client, destination, origin, count, grid, names, ReleaseSettings(EPSILON, DELTA, BANDS), tmp_path,
            partitions=4, seed=3,
        )  # fmt: skip
    assert client.killed and "sending it again" in caplog.text
    assert out.partitions == 4 and out.stats.workers == 4 * COPIES
    frame = read_release(tmp_path)
    # every destination's synthetic workers once: N(d) each, those drawn beyond not written
    assert frame.S000.sum() + out.stats.synthetic_beyond_workers == 4 * COPIES
    assert frame.S000.sum() == out.synthetic_workers
    assert not frame.duplicated(["w_geocode", "h_geocode"]).any()
    local_cluster.client.wait_for_workers(2, timeout=60)
