"""Plausible-deniability synthesis: the private model, candidate generation and the privacy test.

Bindschaedler, Shokri and Gunter (VLDB 2017), Mechanism 1 (Section 2), the generative model
(Section 3) and the tool (Section 5).

1. Assign every record of D to D_S (structure), D_P (parameters) or D_T (seeds) independently at
   random, with the public probabilities ``config.split`` (Section 3, Section 6.1). Independently,
   not as a fixed-size split: then adding or removing one record changes its own subset only,
   which is what the model's parallel composition needs (derivation in :mod:`.statement`). A subset may be
   empty; every step below accepts that.
2. Learn the structure on D_S and the parameters on D_P with differential privacy
   (:mod:`.bayes_structure`, :mod:`.bayes_model`).
3. Mechanism 1, vectorised over a batch: draw seeds uniformly from D_T, resample omega attributes,
   count each candidate's plausible seeds and run Privacy Test 1 or 2. With D_T empty there is no
   seed to draw and every run outputs nothing.
4. The release (:func:`release`): a fixed, public number L of independent runs. Each run abstains
   (outputs nothing) with the public probability ``config.abstain`` whatever the data, and
   otherwise is one run of Mechanism 1 with its own seed drawn uniformly from D_T. Every record
   that passes is written, in run order; how many were written is part of the output. There is no
   stopping rule and no failed exit. Its statement, derived from Theorem 1 for every outcome of a
   run (records and nothing, :mod:`.run_bound`) and composed over the L runs: :mod:`.statement`.

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
sampling; :mod:`petlab.plaindata.dp.noise`); the assignment, seeds and resampling use the caller's
generator (ChaCha20 from OS entropy in a release; seeded for tests and experiments).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from petlab.plaindata.dp.composition import parallel, per_query_epsilon, repeated
from petlab.plaindata.dp.noise import NoiseSource, OpenDPNoise
from petlab.plaindata.dp.privacy_cost import PrivacyCost
from petlab.plaindata.plausible.bayes_model import (
    BayesNet,
    learn_parameters,
    marginal_model,
    resample,
)
from petlab.plaindata.plausible.bayes_structure import Structure, learn_structure
from petlab.plaindata.plausible.privacy_tests import privacy_test_1_batch, privacy_test_2_batch
from petlab.plaindata.secure_random import release_generator
from petlab.progress import bar


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
    abstain: float | None = None  # each run's abstention probability; None: statement.least_abstention

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
        if self.abstain is not None and not 0 <= self.abstain < 1:
            raise ValueError("the abstention probability must lie in [0, 1)")
        for name in ("max_plausible", "max_check_plausible"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True)
class FittedModel:
    model: BayesNet
    structure: Structure
    seeds: np.ndarray  # D_T as index codes
    parameters_budget: PrivacyCost | None

    @property
    def model_budget(self) -> PrivacyCost | None:
        if self.structure.budget is None or self.parameters_budget is None:
            return None
        return parallel([self.structure.budget, self.parameters_budget], "model")


def assign_subsets(
    n: int, shares: tuple[float, float, float], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index sets of D_S, D_P, D_T: every record assigned independently, with probabilities
    ``shares`` (one record's presence changes its own subset only; module docstring, step 1).
    The sets are disjoint and may be empty."""
    subset = rng.choice(3, size=n, p=np.asarray(shares, dtype=float) / sum(shares))
    return np.flatnonzero(subset == 0), np.flatnonzero(subset == 1), np.flatnonzero(subset == 2)


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
    structure_part, parameter_part, seed_part = assign_subsets(len(codes), config.split, rng)
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
        one_table = PrivacyCost(
            per_table,
            0.0,
            "one noisy conditional table",
            "Laplace mechanism, sensitivity 1 (equations 11-14)",
        )
        parameters_budget = repeated(one_table, m, config.model_delta, "parameters (Section 3.4.1)")
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
    """The marginal baseline: the same share of records for parameters (a fresh random assignment)
    and the same per-table budget as :func:`fit`."""
    _, parameter_part, _ = assign_subsets(len(codes), config.split, rng)
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
    """Mechanism 1 for ``count`` candidates (seeds drawn with replacement from D_T). With D_T
    empty no seed can be drawn: every run outputs nothing (``passed`` all false)."""
    seeds = fitted.seeds
    if len(seeds) == 0:
        nothing = np.zeros(count, dtype=np.int64)
        return Candidates(
            np.zeros((count, seeds.shape[1]), np.int64), nothing, nothing, np.zeros(count, bool)
        )
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
class Release:
    """Every record that passed, in run order, and the tally: ``runs`` runs, of which
    ``candidates`` drew a seed (did not abstain) and ``passed`` wrote a record."""

    records: np.ndarray
    runs: int
    candidates: int
    passed: int

    @property
    def pass_rate(self) -> float:
        """Passing records per candidate: a figure of the data (evaluation only)."""
        return self.passed / self.candidates if self.candidates else 0.0


def release(
    fitted: FittedModel,
    runs: int,
    config: PlausibleConfig,
    abstain: float,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
    batch: int = 20_000,
    show_progress: bool = False,
) -> Release:
    """``runs`` independent runs (module docstring, step 4): each abstains with probability
    ``abstain`` (drawn from ``rng``, whatever the data), else runs Mechanism 1; every passing
    record is returned, in run order."""
    if runs < 1:
        raise ValueError("the release needs at least one run")
    if not 0 <= abstain < 1:
        raise ValueError("the abstention probability must lie in [0, 1)")
    written: list[np.ndarray] = []
    candidates = passed = 0
    with bar(total=runs, desc="runs", unit="run", disable=not show_progress) as progress:
        for offset in range(0, runs, batch):
            size = min(batch, runs - offset)
            active = int((rng.random(size) >= abstain).sum())
            if active:
                result = generate_and_test(fitted, active, config, rng, noise)
                written.append(result.records[result.passed])
                passed += int(result.passed.sum())
            candidates += active
            progress.update(size)
    records = np.vstack(written) if written else np.empty((0, fitted.seeds.shape[1]), np.int64)
    return Release(records, runs, candidates, passed)
