"""Release randomness is ChaCha20 from the OS's entropy; seeded runs are reproducible PCG64 and are
never the default."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from petlab.plaindata import cli as synth_cli
from petlab.plaindata.commands import onthemap as onthemap_command
from petlab.plaindata.onthemap.commute_data import generate
from petlab.plaindata.secure_random import CHACHA_ROUNDS, is_secure, partition_generator, release_generator


def test_unseeded_generators_are_chacha20_and_independent():
    first, second = release_generator(), release_generator()
    assert is_secure(first) and first.bit_generator.state["state"]["rounds"] == CHACHA_ROUNDS == 20
    assert not np.array_equal(first.integers(0, 2**63, 8), second.integers(0, 2**63, 8))
    # the numpy samplers on top draw the right laws (a gamma and a binomial, KS / chi-square)
    assert stats.kstest(first.gamma(2.5, size=20_000), stats.gamma(2.5).cdf).pvalue > 1e-4
    counts = np.bincount(first.binomial(6, 0.3, size=20_000), minlength=7)
    expected = stats.binom(6, 0.3).pmf(np.arange(7)) * 20_000
    assert stats.chisquare(counts, expected * counts.sum() / expected.sum()).pvalue > 1e-4


def test_seeded_generators_are_reproducible_and_not_secure():
    assert np.array_equal(release_generator(5).random(4), release_generator(5).random(4))
    assert not is_secure(release_generator(5))


@pytest.mark.parametrize("seed", [None, 3])
def test_the_synthesis_cli_releases_with_the_secure_generator(tmp_path, monkeypatch, seed):
    """``petlab-synth onthemap`` without ``--seed`` samples from ChaCha20, with it from PCG64."""
    data = generate(300, seed=1)
    od, xwalk = tmp_path / "od.csv", tmp_path / "xwalk.csv"
    data.od.to_csv(od, index=False)
    data.crosswalk.to_csv(xwalk, index=False)
    used: list[np.random.Generator] = []

    def recording(seed=None):
        used.append(release_generator(seed))
        return used[-1]

    monkeypatch.setattr(onthemap_command, "release_generator", recording)
    argv = ["onthemap", "--od", str(od), "--xwalk", str(xwalk), "--out", str(tmp_path / "out.csv")]
    assert synth_cli.main(argv + ([] if seed is None else ["--seed", str(seed)])) == 0
    assert len(used) == 1 and is_secure(used[0]) == (seed is None)


def test_partition_generators_are_independent_chacha_streams():
    """A release split across workers: each partition's stream is ChaCha20 keyed from the root and
    its number (distinct, reproducible from the root alone); seeded runs use spawned PCG64."""
    root = 2**255 + 12345
    first, again, other = (partition_generator(root, p, secure=True) for p in (0, 0, 1))
    assert is_secure(first) and is_secure(other)
    assert np.array_equal(first.integers(0, 2**63, 4), again.integers(0, 2**63, 4))
    assert not np.array_equal(
        partition_generator(root, 0, True).integers(0, 2**63, 4), other.integers(0, 2**63, 4)
    )
    seeded = partition_generator(7, 3, secure=False)
    assert not is_secure(seeded)
    assert np.array_equal(seeded.random(3), partition_generator(7, 3, secure=False).random(3))
