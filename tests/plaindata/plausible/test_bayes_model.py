"""The generative model: structure search (equations 4-6), noisy parameters (equation 14), and the
closed form of Pr{y = M(d)} against a brute-force enumeration of the sampler."""

import math
from itertools import product

import numpy as np
import pytest
from scipy import stats

from petlab.plaindata.dp.composition import per_query_epsilon
from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.plausible.bayes_model import (
    BayesNet,
    learn_parameters,
    log_generation_probability,
    resample,
    seed_probabilities,
)
from petlab.plaindata.plausible.bayes_structure import (
    greedy_cfs,
    learn_structure,
    merit,
    symmetrical_uncertainty,
    topological_order,
)
from petlab.plaindata.plausible.entropy import count_lower_bound, entropy_sensitivity

CARDS = np.array([2, 3, 2, 3])
IDENTITY = tuple(np.arange(c) for c in CARDS)


def tiny_model(seed: int = 0) -> BayesNet:
    """X0 root, X1 <- X0, X2 <- X0, X1, X3 <- X2, random tables."""
    rng = np.random.default_rng(seed)
    parents = ((), (0,), (0, 1), (2,))
    tables = []
    for i, p in enumerate(parents):
        configs = math.prod(int(CARDS[j]) for j in p)
        tables.append(rng.dirichlet(np.ones(CARDS[i]), size=configs))
    return BayesNet(CARDS, IDENTITY, parents, topological_order(parents), tuple(tables))


def enumerate_outputs(model: BayesNet, seed: np.ndarray, omega: int) -> dict[tuple, float]:
    """The law of M(seed) by walking every branch of the sequential resampling."""
    law: dict[tuple, float] = {}

    def walk(record, position, probability):
        order = model.resampled(omega)
        if position == len(order):
            law[tuple(record)] = law.get(tuple(record), 0.0) + probability
            return
        i = order[position]
        row = model.tables[i][model.configurations(i, np.array([record]))[0]]
        for value in range(int(model.cardinalities[i])):
            walk([*record[:i], value, *record[i + 1 :]], position + 1, probability * row[value])

    walk(list(seed), 0, 1.0)
    return law


@pytest.mark.parametrize("omega", [0, 1, 2, 3, 4])
def test_closed_form_probability_equals_enumeration(omega):
    model = tiny_model(1)
    seeds = np.array(list(product(*(range(c) for c in CARDS))))
    laws = [enumerate_outputs(model, s, omega) for s in seeds]
    for y in seeds[::5]:
        exact = np.array([law.get(tuple(y), 0.0) for law in laws])
        assert np.allclose(seed_probabilities(model, y, seeds, omega), exact, rtol=1e-12, atol=0)
    assert all(sum(law.values()) == pytest.approx(1.0) for law in laws)


def test_sampler_draws_the_enumerated_law():
    model = tiny_model(2)
    seed = np.array([1, 2, 0, 1])
    law = enumerate_outputs(model, seed, 3)
    rng = np.random.default_rng(3)
    draws = resample(model, np.tile(seed, (30000, 1)), 3, rng)
    keys, counts = np.unique(draws, axis=0, return_counts=True)
    observed = dict(zip(map(tuple, keys), counts, strict=True))
    support = sorted(law)
    expected = np.array([law[s] for s in support]) * len(draws)
    assert set(observed) <= set(support)
    chi2 = stats.chisquare([observed.get(s, 0) for s in support], expected)
    assert chi2.pvalue > 1e-6
    assert (draws[:, 0] == seed[0]).all()  # the kept attribute is copied
    logp = log_generation_probability(model, draws[:50], 3)
    assert np.allclose(np.exp(logp), [law[tuple(d)] for d in draws[:50]])


def test_symmetrical_uncertainty_and_merit_by_hand():
    assert symmetrical_uncertainty(math.log(2), math.log(2), math.log(2)) == 1.0  # X = Y
    assert symmetrical_uncertainty(math.log(2), math.log(3), math.log(6)) == 0.0  # independent
    assert symmetrical_uncertainty(1.0, 1.0, 1.5) == pytest.approx(0.5)
    assert symmetrical_uncertainty(1.0, 1.0, 5.0) == 0.0  # clamped after noise
    r = np.array([0.0, 0.5, 0.4])
    inner = np.array([[0, 0, 0], [0, 0, 0.2], [0, 0.2, 0]])
    assert merit(r, inner, (1, 2)) == pytest.approx(0.9 / math.sqrt(2 + 0.4))
    assert merit(r, inner, ()) == 0.0


def test_greedy_search_is_acyclic_and_within_cost():
    rng = np.random.default_rng(4)
    cards = np.array([5, 7, 3, 10, 2, 4])
    for _ in range(50):
        r = rng.random((6, 6))
        inner = rng.random((6, 6)) * 0.3
        inner = (inner + inner.T) / 2
        parents = greedy_cfs(r, inner, cards, cards, max_cost=150)
        topological_order(parents)  # raises on a cycle
        for i, p in enumerate(parents):
            assert cards[i] * math.prod(int(cards[j]) for j in p) <= 150


def dependent_data(n: int, seed: int) -> np.ndarray:
    """X1 is a noisy copy of X0, X3 of X2; the pairs are independent."""
    rng = np.random.default_rng(seed)
    x0 = rng.integers(0, 4, n)
    x1 = np.where(rng.random(n) < 0.9, x0, rng.integers(0, 4, n))
    x2 = rng.integers(0, 2, n)
    x3 = np.where(rng.random(n) < 0.9, x2, rng.integers(0, 2, n))
    return np.column_stack([x0, x1, x2, x3])


def test_structure_finds_the_dependencies():
    codes = dependent_data(20000, 5)
    cards = np.array([4, 4, 2, 2])
    discretization = tuple(np.arange(c) for c in cards)
    for epsilon in (None, 1.0):
        structure = learn_structure(codes, cards, discretization, 100, epsilon, noise=SeededNoise(6))
        edges = {(j, i) for i, p in enumerate(structure.parents) for j in p}
        assert edges & {(0, 1), (1, 0)} and edges & {(2, 3), (3, 2)}
        assert all({a, b} in ({0, 1}, {2, 3}) for a, b in edges)  # nothing across independent pairs


class RecordingNoise(SeededNoise):
    """Seeded noise that remembers every Laplace call (input, output, scale)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls: list[tuple[np.ndarray, np.ndarray, float]] = []

    def laplace(self, values, scale):
        out = super().laplace(values, scale)
        self.calls.append((np.asarray(values, dtype=float), out, scale))
        return out


def test_structure_noise_scale_is_sensitivity_over_epsilon():
    codes = dependent_data(5000, 7)
    cards = np.array([4, 4, 2, 2])
    discretization = tuple(np.arange(c) for c in cards)
    noise = RecordingNoise(8)
    structure = learn_structure(codes, cards, discretization, 100, 2.0, delta=1e-8, noise=noise)
    (count_in, count_out, count_scale), (_, _, entropy_scale) = noise.calls
    assert count_in[0] == 5000 and count_scale == pytest.approx(1 / 0.2)  # 10% of epsilon
    n_low = count_lower_bound(float(count_out[0]), 0.2, 0.5e-8)
    per_query = per_query_epsilon(1.8, structure.queries, 0.5e-8)
    assert entropy_scale == pytest.approx(entropy_sensitivity(n_low) / per_query)
    assert 2.0 * (1 - 1e-3) < structure.budget.epsilon <= 2.0 and structure.budget.delta <= 1e-8


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_parameter_noise_is_laplace_with_scale_one_over_epsilon(epsilon):
    codes = dependent_data(3000, 9)
    cards = np.array([4, 4, 2, 2])
    parents = ((), (0,), (), (0, 2))
    noise = RecordingNoise(10)
    learn_parameters(codes, cards, IDENTITY_4, parents, epsilon, np.random.default_rng(0), noise=noise)
    assert [scale for *_, scale in noise.calls] == [1 / epsilon] * 4
    errors = np.concatenate([out - values for values, out, _ in noise.calls])
    assert stats.kstest(errors, stats.laplace(scale=1 / epsilon).cdf).pvalue > 1e-4
    # the tables are counts per configuration: the exact counts enter the noise
    assert noise.calls[1][0].sum() == 3000 and len(noise.calls[3][0]) == 4 * 2 * 2


IDENTITY_4 = tuple(np.arange(c) for c in (4, 4, 2, 2))
