"""Noise mechanisms: distributions and the neighbouring-dataset likelihood ratio, checked with
statistical tests at a fixed false-alarm rate (p = 1e-6, as OpenDP's own tests do)."""

import numpy as np
import pytest
from scipy import stats

from petlab.plaindata.dp.noise import (
    OpenDPNoise,
    SeededNoise,
    geometric_mechanism,
    laplace_histogram,
    laplace_mechanism,
)

ALPHA = 1e-6


@pytest.mark.parametrize("source", [OpenDPNoise(), SeededNoise(1)], ids=["opendp", "seeded"])
def test_laplace_distribution(source):
    samples = laplace_mechanism(np.full(20000, 3.0), sensitivity=1.0, epsilon=0.5, noise=source)
    assert stats.kstest(samples, stats.laplace(loc=3.0, scale=2.0).cdf).pvalue > ALPHA
    wrong = stats.kstest(samples, stats.laplace(loc=3.0, scale=2.5).cdf).pvalue
    assert wrong < ALPHA  # the test has the power to see a 25 % scale error


def discrete_laplace_pmf(k: np.ndarray, scale: float) -> np.ndarray:
    r = np.exp(-1.0 / scale)
    return (1 - r) / (1 + r) * r ** np.abs(k)


@pytest.mark.parametrize("source", [OpenDPNoise(), SeededNoise(2)], ids=["opendp", "seeded"])
def test_geometric_distribution(source):
    scale = 2.0
    samples = geometric_mechanism(np.zeros(20000, dtype=np.int64), 1, 1 / scale, noise=source)
    support = np.arange(-12, 13)
    observed = np.array([(samples == k).sum() for k in support] + [(np.abs(samples) > 12).sum()])
    probabilities = discrete_laplace_pmf(support, scale)
    expected = np.append(probabilities, 1 - probabilities.sum()) * len(samples)
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_neighbouring_likelihood_ratio_stays_within_e_to_the_eps():
    """Counts 10 and 11 (neighbours): every output's empirical frequency ratio is within e^eps,
    up to sampling error bounded at the same false-alarm rate."""
    eps, draws = 0.7, 200000
    a = geometric_mechanism(np.full(draws, 10), 1, eps, noise=SeededNoise(3))
    b = geometric_mechanism(np.full(draws, 11), 1, eps, noise=SeededNoise(4))
    z = stats.norm.isf(ALPHA / 2)
    for value in range(5, 17):
        pa, pb = (a == value).mean(), (b == value).mean()
        slack = z * (np.sqrt(pa * (1 - pa) / draws) + np.sqrt(pb * (1 - pb) / draws))
        assert pa <= np.exp(eps) * pb + (1 + np.exp(eps)) * slack
        assert pb <= np.exp(eps) * pa + (1 + np.exp(eps)) * slack
    # and the bound is tight: some output's ratio gets close to e^eps
    ratios = [(a == v).mean() / (b == v).mean() for v in range(5, 10)]
    assert max(ratios) > np.exp(eps) * 0.9


def test_laplace_histogram_uses_scale_two_over_eps():
    counts = np.array([5, 0, 12])
    noisy = np.vstack([laplace_histogram(counts, 1.0, noise=SeededNoise(s)) for s in range(3000)])
    assert np.allclose(noisy.mean(axis=0), counts, atol=0.2)
    assert np.allclose(noisy.std(axis=0), 2 * np.sqrt(2), rtol=0.08)  # sd of Lap(2) is 2 sqrt 2


def test_bad_parameters():
    with pytest.raises(ValueError, match="epsilon"):
        laplace_mechanism([1.0], 1.0, 0.0)
    with pytest.raises(ValueError, match="sensitivity"):
        laplace_mechanism([1.0], -1.0, 1.0)
    with pytest.raises(ValueError, match="integers"):
        geometric_mechanism([1.5], 1, 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        laplace_histogram([-1, 2], 1.0)


def test_bernoulli_binomial_histogram_law_and_its_exact_delta():
    from petlab.plaindata.dp.noise import bernoulli_binomial_delta, bernoulli_binomial_histogram

    keep, trials, p = 0.5, 6, 0.5
    draws = 20000
    for source in (SeededNoise(8), OpenDPNoise()):
        out = bernoulli_binomial_histogram(np.full(draws, 3), keep, trials, p, source)
        law = np.convolve(stats.binom.pmf(range(4), 3, keep), stats.binom.pmf(range(trials + 1), trials, p))
        observed = np.bincount(out, minlength=len(law))
        assert len(observed) == len(law)
        assert stats.chisquare(observed, law * draws).pvalue > 1e-6
    # delta by brute force on n = 0 vs 1: P_1(x) = (1 - q) P_0(x) + q P_0(x - 1)
    base = stats.binom.pmf(np.arange(trials + 2), trials, p)
    shifted = np.r_[0, base[:-1]]
    one = (1 - keep) * base + keep * shifted
    eps = 0.7
    brute = max(np.maximum(one - np.exp(eps) * base, 0).sum(), np.maximum(base - np.exp(eps) * one, 0).sum())
    assert bernoulli_binomial_delta(eps, keep, trials, p, max_count=0) == pytest.approx(brute)
    # at least the mass where only the larger count reaches: all kept and all noise hits
    assert bernoulli_binomial_delta(eps, keep, trials, p, 5) >= keep**6 * p**trials
    assert bernoulli_binomial_delta(2.0, keep, 50, p, 50) < bernoulli_binomial_delta(0.5, keep, 50, p, 50)
