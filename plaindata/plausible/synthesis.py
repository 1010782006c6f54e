"""Plausible-deniability synthesis: the private model, candidate generation and the privacy test.

Bindschaedler, Shokri and Gunter (VLDB 2017), Mechanism 1 (Section 2), the generative model
(Section 3) and the tool (Section 5).

1. Split the data at random into disjoint subsets: D_S (structure), D_P (parameters) and D_T
   (seeds) (Section 3, Section 6.1).
2. Learn the structure on D_S and the parameters on D_P with differential privacy
   (:mod:`.bayes_structure`, :mod:`.bayes_model`). The subsets are disjoint, so
   the model is (max(eps_S, eps_P), max(delta_S, delta_P))-DP by parallel composition (Section 3.5).
3. Mechanism 1, vectorised over a batch: draw seeds uniformly from D_T, resample omega attributes,
   count each candidate's plausible seeds and run Privacy Test 1 or 2.

Counting plausible seeds. Pr{y = M(d)} is 0 unless d agrees with y on the kept attributes and is
then one common value (see :mod:`petlab.plaindata.plausible.bayes_model`), so all the seeds with non-zero
probability are in the seed's partition: the count is the number of D_T records that agree with y on
the kept attributes. The batch computes it for every candidate with one ``np.unique`` over the kept
columns of D_T and the candidates. :func:`petlab.plaindata.plausible.privacy_tests.count_plausible_seeds` (the
per-candidate definition on the vector of all seed probabilities) is the reference the tests
compare it with. Early stopping (Section 5): the tool examines the seeds in a random order, stops
after ``max_check_plausible`` of them or at ``max_plausible`` plausible ones; the number of
plausible seeds among the first M of N examined is hypergeometric, and that is what is drawn.

Randomness: the Laplace noise of the model and of Test 2 comes from OpenDP (OS randomness, exact
sampling; :mod:`petlab.plaindata.dp.noise`); seeds and resampling use a numpy generator seeded from OS entropy
unless the caller passes a seed (tests, reproducible experiments).

Privacy of a release: the model's budget, and for each released record Theorem 1's (eps, delta)
with respect to D_T (Test 2 only; Test 1 gives plausible deniability, not differential privacy).
Each record of D is in exactly one subset. Releasing R records composes Theorem 1's guarantee R
times for the seeds (the paper's Discussion); the report gives basic and advanced composition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from petlab.plaindata.dp.composition import (
    Budget,
    advanced_composition,
    basic_composition,
    best_composition,
    parallel_composition,
    per_query_epsilon,
)
from petlab.plaindata.dp.noise import NoiseSource, OpenDPNoise
from petlab.plaindata.plausible.bayes_model import (
    BayesNet,
    learn_parameters,
    marginal_model,
    resample,
)
from petlab.plaindata.plausible.bayes_structure import Structure, learn_structure
from petlab.plaindata.plausible.privacy_tests import (
    Theorem1,
    default_t,
    privacy_test_1_batch,
    privacy_test_2_batch,
    theorem1,
)
from petlab.plaindata.secure_random import release_generator


@dataclass(frozen=True)
class PlausibleConfig:
    k: int = 50
    gamma: float = 4.0
    omega: int = 9
    eps0: float | None = 1.0  # None: Privacy Test 1 (deterministic)
    t: int | None = None  # Theorem 1's t; default: see plausible_tests.default_t
    model_epsilon: float | None = 1.0  # None: the un-noised model (no DP for D_S, D_P)
    model_delta: float = 2.0**-30
    split: tuple[float, float, float] = (0.2, 0.3, 0.5)  # D_S, D_P, D_T
    max_cost: int = 2000
    alpha: float = 1.0
    max_plausible: int | None = None
    max_check_plausible: int | None = None

    def __post_init__(self) -> None:
        if self.k < 1 or self.gamma <= 1:
            raise ValueError("need k >= 1 and gamma > 1")
        if self.eps0 is not None and not self.eps0 > 0:
            raise ValueError("eps0 must be positive (or None for Privacy Test 1)")
        if self.model_epsilon is not None and not self.model_epsilon > 0:
            raise ValueError("the model's epsilon must be positive")
        if not 0 < self.model_delta < 1:
            raise ValueError("the model's delta must lie in (0, 1)")
        if len(self.split) != 3 or min(self.split) <= 0 or not math.isclose(sum(self.split), 1.0):
            raise ValueError("split needs three positive shares that sum to 1 (structure, parameters, seeds)")
        if self.max_cost < 2:
            raise ValueError("max_cost must be at least 2")
        for name in ("max_plausible", "max_check_plausible"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True)
class FittedModel:
    model: BayesNet
    structure: Structure
    seeds: np.ndarray  # D_T as index codes
    parameters_budget: Budget | None

    @property
    def model_budget(self) -> Budget | None:
        if self.structure.budget is None or self.parameters_budget is None:
            return None
        return parallel_composition(self.structure.budget, self.parameters_budget)


def split_indices(n: int, shares: tuple[float, float, float], rng: np.random.Generator):
    """Disjoint random index sets for D_S, D_P, D_T (data-independent, so free of privacy cost)."""
    order = rng.permutation(n)
    first = round(shares[0] * n)
    second = first + round(shares[1] * n)
    parts = order[:first], order[first:second], order[second:]
    if min(len(p) for p in parts) == 0:
        raise ValueError(f"{n} records are too few to split into structure, parameter and seed subsets")
    return parts


def fit(
    codes: np.ndarray,
    cardinalities: np.ndarray,
    discretization: tuple[np.ndarray, ...],
    config: PlausibleConfig,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
) -> FittedModel:
    """Steps 1-2: split, then the private structure and parameters."""
    if config.omega > codes.shape[1]:
        raise ValueError(f"omega = {config.omega} exceeds the {codes.shape[1]} attributes")
    source = noise or OpenDPNoise()
    structure_part, parameter_part, seed_part = split_indices(len(codes), config.split, rng)
    eps = config.model_epsilon
    structure = learn_structure(
        codes[structure_part],
        cardinalities,
        discretization,
        config.max_cost,
        eps,
        config.model_delta,
        noise=source,
    )
    m = codes.shape[1]
    if eps is None:
        per_table, parameters_budget = None, None
    else:
        per_table = per_query_epsilon(eps, m, config.model_delta)
        parameters_budget = best_composition(per_table, m, config.model_delta)
    model = learn_parameters(
        codes[parameter_part],
        cardinalities,
        discretization,
        structure.parents,
        per_table,
        rng,
        config.alpha,
        source,
    )
    return FittedModel(model, structure, codes[seed_part], parameters_budget)


def fit_marginals(
    codes: np.ndarray,
    cardinalities: np.ndarray,
    config: PlausibleConfig,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
) -> BayesNet:
    """The marginal baseline: the same share of records for parameters (a fresh random split) and the
    same per-table budget as :func:`fit`."""
    _, parameter_part, _ = split_indices(len(codes), config.split, rng)
    m = codes.shape[1]
    per_table = (
        None
        if config.model_epsilon is None
        else per_query_epsilon(config.model_epsilon, m, config.model_delta)
    )
    return marginal_model(codes[parameter_part], cardinalities, per_table, rng, config.alpha, noise)


def sample_marginals(model: BayesNet, count: int, rng: np.random.Generator) -> np.ndarray:
    """The marginal baseline's records: every attribute drawn independently (no seed involved)."""
    return resample(model, np.zeros((count, model.attributes), dtype=np.int64), model.attributes, rng)


def plausible_counts(
    seeds: np.ndarray,
    candidates: np.ndarray,
    kept: tuple[int, ...],
    max_plausible: int | None = None,
    max_check_plausible: int | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Plausible seeds of every candidate: D_T records that agree with it on the kept attributes."""
    n = len(seeds)
    if not kept:
        counts = np.full(len(candidates), n, dtype=np.int64)
    else:
        columns = list(kept)
        _, inverse = np.unique(
            np.vstack([seeds[:, columns], candidates[:, columns]]), axis=0, return_inverse=True
        )
        inverse = inverse.ravel()
        per_key = np.bincount(inverse[:n], minlength=int(inverse.max()) + 1)
        counts = per_key[inverse[n:]]
    if max_check_plausible is not None and max_check_plausible < n:
        counts = (rng or release_generator()).hypergeometric(counts, n - counts, max_check_plausible)
    if max_plausible is not None:
        counts = np.minimum(counts, max_plausible)
    return counts


@dataclass
class Candidates:
    records: np.ndarray
    seed_rows: np.ndarray
    counts: np.ndarray
    passed: np.ndarray


def generate_and_test(
    fitted: FittedModel,
    count: int,
    config: PlausibleConfig,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
) -> Candidates:
    """Mechanism 1 for ``count`` candidates (seeds drawn with replacement from D_T)."""
    seeds = fitted.seeds
    seed_rows = rng.integers(len(seeds), size=count)
    candidates = resample(fitted.model, seeds[seed_rows], config.omega, rng)
    counts = plausible_counts(
        seeds,
        candidates,
        fitted.model.kept(config.omega),
        config.max_plausible,
        config.max_check_plausible,
        rng,
    )
    if config.eps0 is None:
        passed = privacy_test_1_batch(counts, config.k)
    else:
        passed = privacy_test_2_batch(counts, config.k, config.eps0, noise or OpenDPNoise())
    return Candidates(candidates, seed_rows, counts, passed)


@dataclass(frozen=True)
class SynthesisRun:
    """The released records (at most the requested count) and the test's tally over all candidates
    generated (the last batch may pass more than were needed)."""

    records: np.ndarray
    candidates: int
    passed: int

    @property
    def pass_rate(self) -> float:
        return self.passed / self.candidates if self.candidates else 0.0


def synthesize(
    fitted: FittedModel,
    count: int,
    config: PlausibleConfig,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
    max_candidates: int | None = None,
    batch: int = 20_000,
    show_progress: bool = False,
) -> SynthesisRun:
    """Generate candidates in batches until ``count`` pass the test (or ``max_candidates`` tried)."""
    if count < 1:
        raise ValueError("count must be at least 1")
    limit = max_candidates if max_candidates is not None else 100 * count
    released: list[np.ndarray] = []
    have = tried = passed = 0
    with tqdm(total=count, desc="released", unit="rec", disable=not show_progress) as progress:
        while have < count and tried < limit:
            size = min(batch, limit - tried)
            result = generate_and_test(fitted, size, config, rng, noise)
            tried += size
            passed += int(result.passed.sum())
            accepted = result.records[result.passed][: count - have]
            released.append(accepted)
            have += len(accepted)
            progress.update(len(accepted))
            # no candidate count or pass rate on screen: both are confidential (issue 16)
    records = np.vstack(released) if released else np.empty((0, fitted.seeds.shape[1]), np.int64)
    return SynthesisRun(records, tried, passed)


@dataclass(frozen=True)
class PlausiblePrivacyReport:
    config: PlausibleConfig
    structure: Budget | None
    parameters: Budget | None
    model: Budget | None
    per_record: Theorem1 | None
    released: int

    @classmethod
    def of(cls, fitted: FittedModel, config: PlausibleConfig, released: int) -> PlausiblePrivacyReport:
        per_record = None
        if config.eps0 is not None and config.k >= 2:
            t = config.t if config.t is not None else default_t(config.k, config.eps0, config.model_delta)
            per_record = theorem1(config.k, config.gamma, config.eps0, t)
        return cls(
            config,
            fitted.structure.budget,
            fitted.parameters_budget,
            fitted.model_budget,
            per_record,
            released,
        )

    def lines(self) -> list[str]:
        c = self.config
        out = [f"plausible deniability: k = {c.k}, gamma = {c.gamma:g}, omega = {c.omega}"]
        if self.model is None:
            out.append("model: learned WITHOUT noise (no differential privacy for D_S and D_P)")
        else:
            out.append(
                f"model: structure {self.structure} (noisy entropies + record count), parameters "
                f"{self.parameters}; disjoint subsets, so the model is {self.model}-DP"
            )
        if self.per_record is None:
            out.append(
                "test: Privacy Test 1 (deterministic): (k, gamma)-plausible deniability, no DP guarantee"
            )
        else:
            r = self.per_record
            out.append(
                f"test: Privacy Test 2, eps0 = {c.eps0:g}: each released record is ({r.epsilon:.4g}, "
                f"{r.delta:.3g})-DP for the seeds (Theorem 1, t = {r.t})"
            )
            if self.released > 1:
                basic = basic_composition(r.epsilon, self.released, r.delta)
                advanced = advanced_composition(r.epsilon, self.released, c.model_delta, r.delta)
                total, how = (basic, "basic") if basic.epsilon <= advanced.epsilon else (advanced, "advanced")
                out.append(
                    f"all {self.released} released records together: {total}-DP for the seeds by {how} "
                    "composition (Discussion, Section 8)"
                )
        return out
