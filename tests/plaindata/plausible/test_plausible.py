"""Mechanism 1 end to end: plausible-seed counts against the definition, Test 2's pass rate against
the Laplace tail, early stopping against the tool's loop, schema and domains, the privacy report."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from petlab.plaindata import acs_sample_path
from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.metrics.tabular import all_marginal_tvds
from petlab.plaindata.plausible.bayes_model import seed_probabilities
from petlab.plaindata.plausible.privacy_tests import (
    count_plausible_seeds,
    default_t,
    partitions,
    privacy_test_2_batch,
)
from petlab.plaindata.plausible.statement import abstention, report_lines, run_cost
from petlab.plaindata.plausible.synthesis import (
    PlausibleConfig,
    fit,
    fit_marginals,
    generate_and_test,
    plausible_counts,
    release,
    sample_marginals,
)
from petlab.plaindata.plausible.tabular_schema import acs_discretization, acs_domains_path, load_domains


@pytest.fixture(scope="module")
def acs():
    schema = load_domains(acs_domains_path())
    frame = pd.read_csv(acs_sample_path())
    return schema, frame, schema.encode(frame)


def fitted_model(acs, **overrides):
    schema, _, codes = acs
    config = PlausibleConfig(**{"k": 5, "gamma": 4.0, "omega": 7, **overrides})
    rng = np.random.default_rng(11)
    return config, fit(codes, schema.cardinalities, acs_discretization(schema), config, rng, SeededNoise(12))


def brute_force_count(p: np.ndarray, seed: int, gamma: float) -> int:
    """Definition-level count: the seed's partition found by walking the ranges."""
    i = 0
    while not (gamma ** -(i + 1) < p[seed] <= gamma**-i):
        i += 1
    return int(sum(1 for q in p if q > 0 and gamma ** -(i + 1) < q <= gamma**-i))


@pytest.mark.parametrize("omega", [4, 7, 10])
def test_test_1_counts_equal_the_definition(acs, omega):
    config, fitted = fitted_model(acs, omega=omega, eps0=None)
    rng = np.random.default_rng(13)
    result = generate_and_test(fitted, 60, config, rng)
    for y, seed, count, passed in zip(
        result.records, result.seed_rows, result.counts, result.passed, strict=True
    ):
        p = seed_probabilities(fitted.model, y, fitted.seeds, omega)
        assert count == brute_force_count(p, int(seed), config.gamma)
        assert count == count_plausible_seeds(p, int(seed), config.gamma)
        assert passed == (count >= config.k)
    # all seeds with non-zero probability share the seed's partition (plaindata/plausible/bayes_model.py)
    p = seed_probabilities(fitted.model, result.records[0], fitted.seeds, omega)
    assert len(set(partitions(p, config.gamma)[p > 0])) == 1
    assert 0 < result.passed.mean() < 1 or omega == 10


@pytest.mark.parametrize("count, k, eps0", [(50, 50, 1.0), (46, 50, 1.0), (55, 50, 0.3)])
def test_test_2_pass_rate_is_the_laplace_tail(count, k, eps0):
    trials = 40000
    passed = privacy_test_2_batch(np.full(trials, count), k, eps0, SeededNoise(count + k))
    # P(count >= k + Lap(1/eps0))
    expected = stats.laplace(loc=k, scale=1 / eps0).cdf(count)
    assert stats.binomtest(int(passed.sum()), trials, expected).pvalue > 1e-6


def test_early_stopping_has_the_tools_law():
    """max_check_plausible: the count among the first M seeds of a random order (the tool's loop)."""
    rng = np.random.default_rng(14)
    seeds = rng.integers(0, 3, size=(400, 2))
    candidate = np.array([[1, 2]])
    matches = (seeds == candidate).all(axis=1)
    tool = [int(matches[rng.permutation(400)[:50]].sum()) for _ in range(4000)]
    ours = [int(plausible_counts(seeds, candidate, (0, 1), None, 50, rng)[0]) for _ in range(4000)]
    assert stats.ks_2samp(tool, ours).pvalue > 1e-4
    capped = plausible_counts(seeds, np.repeat(candidate, 5, 0), (0, 1), max_plausible=7)
    assert (capped == min(int(matches.sum()), 7)).all()


def test_synthetics_have_the_schema_and_domains(acs):
    schema, frame, _ = acs
    config, fitted = fitted_model(acs, omega=9)
    run = release(fitted, 400, config, 0.0, np.random.default_rng(15), SeededNoise(16))
    assert 0 < len(run.records) == run.passed <= run.candidates == 400
    synthetic = schema.decode(run.records)[list(frame.columns)]
    assert list(synthetic.columns) == list(frame.columns)
    assert (synthetic.dtypes == frame.dtypes).all()
    for name, domain in zip(schema.names, schema.domains, strict=True):
        assert set(synthetic[name]) <= set(domain)
    with pytest.raises(ValueError, match="outside its domain"):
        schema.encode(frame.assign(age=frame.age + 100))


def test_synthetics_keep_pairwise_statistics_better_than_marginals(acs):
    """Figure 4 on the sample: mean 2-way TVD of synthetics below that of the marginal baseline
    (un-noised model: 2,000 parameter records are too few for Laplace noise of scale 11 per cell;
    seeds 17-19 gave 0.128/0.125/0.122 against 0.148/0.146/0.146)."""
    schema, _, codes = acs
    config = PlausibleConfig(k=5, omega=9, model_epsilon=None, split=(0.2, 0.4, 0.4))
    rng = np.random.default_rng(17)
    fitted = fit(codes, schema.cardinalities, acs_discretization(schema), config, rng)
    synthetic = schema.decode(release(fitted, 10000, config, 0.0, rng, SeededNoise(18)).records)
    marginal_model = fit_marginals(codes, schema.cardinalities, config, np.random.default_rng(17))
    marginals = schema.decode(sample_marginals(marginal_model, 10000, rng))
    reals = schema.decode(fitted.seeds)
    ours = np.mean(list(all_marginal_tvds(reals, synthetic, 2).values()))
    theirs = np.mean(list(all_marginal_tvds(reals, marginals, 2).values()))
    assert ours < theirs - 0.01


def test_privacy_report_and_theorem_1(acs):
    config, fitted = fitted_model(acs, k=50, eps0=1.0)
    model = fitted.model_budget
    assert model.epsilon == pytest.approx(1.0, rel=1e-3) and model.delta <= 2.0**-30
    # default t: the largest t with exp(-(k - t)) <= 2^-30, i.e. k - t >= 30 ln 2 = 20.8: t = 29
    assert default_t(50, 1.0, 2.0**-30) == 29
    per_run = run_cost(config)
    assert per_run.epsilon == pytest.approx(1 + math.log(1 + 4 / 29))
    assert per_run.delta == pytest.approx(math.exp(-21))  # the default abstention adds nothing
    assert abstention(config) == 0.0079
    text = "\n".join(report_lines(fitted, config, 1000))
    assert "(epsilon = 1.1293, delta = 7.59e-10)-DP (Theorem 1" in text and "t = 29" in text
    assert "Definition 1 is NOT guaranteed" in text and "at most 0.183" in text
    assert "whole release: the model and the 1000 runs" in text and "1000 x the part below" in text
    assert "(epsilon = 756.1924, delta = 7.6e-07)-DP (parallel" in text  # the docs quote it
    config1, fitted1 = fitted_model(acs, eps0=None, model_epsilon=None)
    text = "\n".join(report_lines(fitted1, config1, 10))
    assert "WITHOUT noise" in text and "no differential privacy for the seeds" in text
    assert "every written record has at least k = 5 plausible seeds" in text
    assert run_cost(config1) is None
    config2, fitted2 = fitted_model(acs, k=50, max_check_plausible=100)
    text = "\n".join(report_lines(fitted2, config2, 10))
    assert "no differential-privacy figure covers the runs" in text and "whole release" not in text
    config3, fitted3 = fitted_model(acs, k=1)
    text = "\n".join(report_lines(fitted3, config3, 10))
    assert "k = 1: Theorem 1 has no t" in text and "whole release" not in text


def test_bad_configuration_is_a_clear_error():
    with pytest.raises(ValueError, match="gamma"):
        PlausibleConfig(gamma=1.0)
    with pytest.raises(ValueError, match="split"):
        PlausibleConfig(split=(0.5, 0.5, 0.0))
    with pytest.raises(ValueError, match="eps0"):
        PlausibleConfig(eps0=0.0)
