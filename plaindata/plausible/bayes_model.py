"""The generative model's parameters, seed-based synthesis and Pr{y = M(d)}.

Bindschaedler, Shokri and Gunter (VLDB 2017), Sections 3.1-3.2 and 3.4-3.4.1.

* Model (equation 2, with equation 7's discretized parents): P(x) = prod_i P(x_i | D(x_{P_i})).
* Parameters (equations 11-14): for attribute i and each configuration c of its discretized
  parents, the counts N_{i,c,v} of the parameter subset D_P get fresh Lap(1/eps_a) noise each
  (adding or removing a record changes one count per attribute: sensitivity 1, so each table is
  eps_a-DP and the m tables compose; see :func:`petlab.plaindata.dp.composition.per_query_epsilon`). The
  conditional is one draw theta_{i,c} ~ Dirichlet(max(noisy, 0) + alpha / |X_i|), alpha the prior mass
  per configuration (default 1; equation 12: the paper
  samples rather than taking the mode, equation 13, for variety).
* Synthesis (Section 3.2, equation 3): keep the first m - omega attributes of the seed in the
  dependency (topological) order and resample the last omega in that order, each from its
  conditional given the current values of its parents.
* Pr{y = M(d)}: a parent precedes its child in the order, so when attribute pi(i) is resampled
  its parents already hold y's values (kept ones equal the seed's, which must equal y's).
  Hence Pr{y = M(d)} = [d and y agree on the kept attributes] * prod_{resampled i} theta_i(y_i |
  D(y_{P_i})): 0 when a kept attribute differs, and one common value for every seed that agrees.
  ``tests/plaindata/plausible/test_bayes_model.py`` checks this closed form against a brute-force enumeration
  of the sampler's outputs.
* Marginal baseline (Section 3.2): the same learning with every parent set empty and omega = m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from petlab.plaindata.dp.noise import NoiseSource, OpenDPNoise
from petlab.plaindata.plausible.bayes_structure import discretized_cardinalities, topological_order


@dataclass(frozen=True)
class BayesNet:
    cardinalities: np.ndarray
    discretization: tuple[np.ndarray, ...]
    parents: tuple[tuple[int, ...], ...]
    order: tuple[int, ...]
    tables: tuple[np.ndarray, ...]  # tables[i][config, value] = P(X_i = value | config)

    @property
    def attributes(self) -> int:
        return len(self.cardinalities)

    def kept(self, omega: int) -> tuple[int, ...]:
        """Attributes copied from the seed: the first m - omega in dependency order."""
        if not 0 <= omega <= self.attributes:
            raise ValueError(f"omega must lie in 0..{self.attributes}")
        return self.order[: self.attributes - omega]

    def resampled(self, omega: int) -> tuple[int, ...]:
        return self.order[self.attributes - omega :] if omega else ()

    def configurations(self, attribute: int, codes: np.ndarray) -> np.ndarray:
        """Index of each record's discretized parent configuration for ``attribute``."""
        index = np.zeros(len(codes), dtype=np.int64)
        sizes = discretized_cardinalities(self.discretization)
        for j in self.parents[attribute]:
            index = index * sizes[j] + self.discretization[j][codes[:, j]]
        return index


def configuration_count(parents: tuple[int, ...], discretization: tuple[np.ndarray, ...]) -> int:
    sizes = discretized_cardinalities(discretization)
    return math.prod(int(sizes[j]) for j in parents)


def learn_parameters(
    codes: np.ndarray,
    cardinalities: np.ndarray,
    discretization: tuple[np.ndarray, ...],
    parents: tuple[tuple[int, ...], ...],
    epsilon_per_table: float | None,
    rng: np.random.Generator,
    alpha: float = 1.0,
    noise: NoiseSource | None = None,
) -> BayesNet:
    """Conditional tables from the parameter subset ``codes`` (D_P); no noise when
    ``epsilon_per_table`` is None (the un-noised model)."""
    if alpha <= 0:
        raise ValueError("the Dirichlet prior mass alpha must be positive")
    source = noise or OpenDPNoise()
    skeleton = BayesNet(np.asarray(cardinalities), discretization, parents, topological_order(parents), ())
    tables = []
    for i in range(len(cardinalities)):
        configs = configuration_count(parents[i], discretization)
        cells = skeleton.configurations(i, codes) * int(cardinalities[i]) + codes[:, i]
        counts = np.bincount(cells, minlength=configs * int(cardinalities[i])).astype(float)
        if epsilon_per_table is not None:
            counts = source.laplace(counts, 1.0 / epsilon_per_table)
        prior = alpha / int(cardinalities[i])  # alpha: prior mass per configuration, spread evenly
        concentration = np.maximum(counts, 0.0).reshape(configs, int(cardinalities[i])) + prior
        table = rng.gamma(concentration)
        table /= table.sum(axis=1, keepdims=True)
        tables.append(table)
    return BayesNet(skeleton.cardinalities, discretization, parents, skeleton.order, tuple(tables))


def resample(model: BayesNet, seeds: np.ndarray, omega: int, rng: np.random.Generator) -> np.ndarray:
    """Candidates from seed records (rows of ``seeds``): equation 3 for the last omega attributes."""
    out = np.array(seeds, dtype=np.int64, copy=True)
    for i in model.resampled(omega):
        cumulative = np.cumsum(model.tables[i], axis=1)
        rows = cumulative[model.configurations(i, out)]
        u = rng.random(len(out)) * rows[:, -1]
        out[:, i] = np.minimum((rows <= u[:, None]).sum(axis=1), int(model.cardinalities[i]) - 1)
    return out


def log_generation_probability(model: BayesNet, candidates: np.ndarray, omega: int) -> np.ndarray:
    """ln prod_{resampled i} theta_i(y_i | D(y_{P_i})) for each candidate y (the common value of
    ln Pr{y = M(d)} over the seeds d that agree with y on the kept attributes)."""
    total = np.zeros(len(candidates))
    for i in model.resampled(omega):
        total += np.log(model.tables[i][model.configurations(i, candidates), candidates[:, i]])
    return total


def seed_probabilities(model: BayesNet, candidate: np.ndarray, seeds: np.ndarray, omega: int) -> np.ndarray:
    """Pr{y = M(d_a)} for every seed record d_a (one numpy pass over the seeds)."""
    candidate = np.asarray(candidate)[None, :]
    kept = list(model.kept(omega))
    agree = (seeds[:, kept] == candidate[:, kept]).all(axis=1)
    return np.where(agree, math.exp(float(log_generation_probability(model, candidate, omega)[0])), 0.0)


def marginal_model(
    codes: np.ndarray,
    cardinalities: np.ndarray,
    epsilon_per_table: float | None,
    rng: np.random.Generator,
    alpha: float = 1.0,
    noise: NoiseSource | None = None,
) -> BayesNet:
    """The marginal baseline: independent attributes (use it with omega = m)."""
    identity = tuple(np.arange(int(c)) for c in cardinalities)
    empty = tuple(() for _ in cardinalities)
    return learn_parameters(codes, cardinalities, identity, empty, epsilon_per_table, rng, alpha, noise)
