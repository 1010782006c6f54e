"""Differentially private structure learning for the generative model.

Bindschaedler, Shokri and Gunter (VLDB 2017), Sections 3.3 and 3.3.1.

* Correlation: the symmetrical uncertainty (equation 5),
  SU(X, Y) = 2 (H(X) + H(Y) - H(X, Y)) / (H(X) + H(Y)), in [0, 1].
* Merit of a parent set S for attribute i (equation 4, Hall's correlation-based feature selection):
  merit_i(S) = sum_{j in S} r(i, j) / sqrt(|S| + 2 sum_{j < l in S} r(j, l)), with
  r(i, j) = SU(X_i, D(X_j)) and r(j, l) = SU(D(X_j), D(X_l)), D the discretization of equation 7
  (parents are always discretized, the target never).
* Cost (equation 6): |X_i| * prod_{j in S} |D(X_j)| <= max_cost, the number of cells of the
  conditional table of X_i.
* Search: greedy from empty parent sets; each step adds the edge j -> i with the largest merit
  gain that keeps the graph acyclic and within the cost; it stops when no edge improves a merit
  by at least ``min_gain`` (0.01). The threshold is ours: without it a root attribute takes any
  parent whose SU is sampling or privacy noise (SU of independent attributes is small but
  positive), which only multiplies the cells of its table and the Laplace noise they carry.
* Privacy (Section 3.3.1): every entropy the search can use (H(X_i), H(D(X_j)), H(X_i, D(X_j)),
  H(D(X_j), D(X_l)); identical variables counted once) is computed once with fresh
  Lap(Delta / eps_e) noise (equation 8), Delta = h_b(1/n_low) from :mod:`petlab.plaindata.plausible.entropy`
  (equation 9 derived there, n_low from the noisy count of equation 10). The K entropies compose
  optimally (dp_accounting; or basic, if smaller), the count by sequential composition: the
  structure is (eps_n + eps_K, delta' + delta_n)-DP (a :class:`PrivacyCost` with those parts).
  Noisy entropies are clamped to [0, ln |domain|] and SU to [0, 1] (post-processing). An empty
  D_S is allowed (each record is assigned to it at random, so it can be): every entropy is 0
  before the noise, and the noisy count covers the size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from petlab.plaindata.dp.composition import per_query_epsilon, repeated, sequential
from petlab.plaindata.dp.noise import NoiseSource, OpenDPNoise
from petlab.plaindata.dp.privacy_cost import PrivacyCost
from petlab.plaindata.plausible.entropy import count_lower_bound, entropy, entropy_sensitivity

# a variable of an entropy query: (attribute, discretized?); identical variables are canonical
Variable = tuple[int, bool]


@dataclass(frozen=True)
class Structure:
    """Parent sets (tuples of attribute indices) and a topological order of the attributes."""

    parents: tuple[tuple[int, ...], ...]
    order: tuple[int, ...]
    budget: PrivacyCost | None  # None when learned without noise
    entropy_scale: float  # Laplace scale of each noisy entropy (0 without noise)
    queries: int  # number of noisy entropies


def discretized_cardinalities(discretization: tuple[np.ndarray, ...]) -> np.ndarray:
    return np.array([int(d.max()) + 1 for d in discretization], dtype=np.int64)


def _canonical(variable: Variable, discretization) -> Variable:
    j, discrete = variable
    identity = len(discretization[j]) == int(discretization[j].max()) + 1
    return (j, discrete and not identity)


def entropy_queries(discretization: tuple[np.ndarray, ...]) -> list[tuple[Variable, ...]]:
    """Every entropy the search may need, each once (sorted for a reproducible noise order)."""
    m = len(discretization)
    keys: set[tuple[Variable, ...]] = set()
    for i in range(m):
        keys.add(((i, False),))
        keys.add((_canonical((i, True), discretization),))
        for j in range(m):
            if i != j:
                keys.add(tuple(sorted(((i, False), _canonical((j, True), discretization)))))
    for j, other in combinations(range(m), 2):
        keys.add(
            tuple(sorted((_canonical((j, True), discretization), _canonical((other, True), discretization))))
        )
    return sorted(keys)


def _column(codes: np.ndarray, variable: Variable, discretization) -> np.ndarray:
    j, discrete = variable
    return discretization[j][codes[:, j]] if discrete else codes[:, j]


def _domain_size(variable: Variable, cardinalities, discrete_cardinalities) -> int:
    j, discrete = variable
    return int(discrete_cardinalities[j] if discrete else cardinalities[j])


def symmetrical_uncertainty(h_x: float, h_y: float, h_xy: float) -> float:
    total = h_x + h_y
    if total <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 2.0 * (total - h_xy) / total)))


def merit(
    target_correlations: np.ndarray, parent_correlations: np.ndarray, parents: tuple[int, ...]
) -> float:
    """Equation 4 for parent set ``parents`` (target_correlations[j] = r(i, j))."""
    if not parents:
        return 0.0
    numerator = sum(target_correlations[j] for j in parents)
    inner = sum(parent_correlations[a, b] for a, b in combinations(parents, 2))
    return float(numerator / math.sqrt(len(parents) + 2.0 * inner))


def _creates_cycle(parents: list[set[int]], child: int, parent: int) -> bool:
    """Would the edge parent -> child close a cycle, i.e. is child an ancestor of parent?"""
    stack, seen = [parent], set()
    while stack:
        node = stack.pop()
        if node == child:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(parents[node])
    return False


def topological_order(parents: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """Kahn's algorithm, smallest attribute index first among the ready ones."""
    remaining = {i: set(p) for i, p in enumerate(parents)}
    order: list[int] = []
    while remaining:
        ready = sorted(i for i, p in remaining.items() if not p)
        if not ready:
            raise ValueError("the parent sets contain a cycle")
        node = ready[0]
        order.append(node)
        del remaining[node]
        for p in remaining.values():
            p.discard(node)
    return tuple(order)


def greedy_cfs(
    target_correlations: np.ndarray,
    parent_correlations: np.ndarray,
    cardinalities: np.ndarray,
    discrete_cardinalities: np.ndarray,
    max_cost: int,
    min_gain: float = 0.01,
) -> tuple[tuple[int, ...], ...]:
    """Greedy CFS over all attributes at once (target_correlations[i, j] = r(i, j))."""
    m = len(cardinalities)
    parents: list[set[int]] = [set() for _ in range(m)]
    merits = np.zeros(m)
    while True:
        best_gain, best_edge = min_gain, None
        for i in range(m):
            cost = int(cardinalities[i]) * math.prod(int(discrete_cardinalities[j]) for j in parents[i])
            for j in range(m):
                if j == i or j in parents[i] or cost * int(discrete_cardinalities[j]) > max_cost:
                    continue
                if _creates_cycle(parents, i, j):
                    continue
                gain = (
                    merit(target_correlations[i], parent_correlations, tuple(sorted(parents[i] | {j})))
                    - merits[i]
                )
                if gain > best_gain:
                    best_gain, best_edge = gain, (i, j)
        if best_edge is None:
            return tuple(tuple(sorted(p)) for p in parents)
        i, j = best_edge
        parents[i].add(j)
        merits[i] += best_gain


def _noisy_entropies(
    exact: np.ndarray,
    records: int,
    epsilon: float,
    delta: float,
    count_share: float,
    noise: NoiseSource | None,
) -> tuple[np.ndarray, PrivacyCost, float]:
    """The (epsilon, delta)-DP entropies of :func:`learn_structure`: ``count_share`` of epsilon and
    half of delta to the record count (equation 10), the rest to the ``exact`` entropies (equation
    9); their cost and the entropies' Laplace scale."""
    if not epsilon > 0 or not 0 < delta < 1 or not 0 < count_share < 1:
        raise ValueError("need epsilon > 0, 0 < delta < 1 and 0 < count_share < 1")
    source = noise or OpenDPNoise()
    epsilon_count, delta_count = count_share * epsilon, delta / 2
    noisy_count = float(source.laplace(np.array([float(records)]), 1.0 / epsilon_count)[0])
    n_low = count_lower_bound(noisy_count, epsilon_count, delta_count)
    epsilon_entropy = per_query_epsilon(epsilon - epsilon_count, len(exact), delta / 2)
    scale = entropy_sensitivity(n_low) / epsilon_entropy
    noisy = source.laplace(exact, scale)
    count_cost = PrivacyCost(
        epsilon_count,
        delta_count,
        "noisy record count of D_S and its lower bound (equation 10)",
        "Laplace mechanism; the bound fails with probability delta_n",
    )
    one_entropy = PrivacyCost(
        epsilon_entropy,
        0.0,
        "one noisy entropy",
        "Laplace mechanism, sensitivity h_b(1/n_low), equation 9",
    )
    entropies = repeated(one_entropy, len(exact), delta / 2, f"{len(exact)} noisy entropies")
    budget = sequential([count_cost, entropies], "structure (Section 3.3.1)")
    return noisy, budget, scale


def learn_structure(
    codes: np.ndarray,
    cardinalities: np.ndarray,
    discretization: tuple[np.ndarray, ...],
    max_cost: int,
    epsilon: float | None,
    delta: float = 2.0**-30,
    count_share: float = 0.1,
    noise: NoiseSource | None = None,
) -> Structure:
    """Learn the parent sets from ``codes`` (records of the structure subset D_S).

    ``epsilon`` None learns from exact entropies (the paper's un-noised model, for comparison);
    otherwise the structure is (epsilon, delta)-DP: ``count_share`` of epsilon and half of delta go
    to the record count (equation 10), the rest to the entropies."""
    m = codes.shape[1]
    discrete_cardinalities = discretized_cardinalities(discretization)
    queries = entropy_queries(discretization)
    exact = np.array(
        [entropy(np.column_stack([_column(codes, v, discretization) for v in q])) for q in queries]
    )
    ceilings = np.array(
        [sum(math.log(_domain_size(v, cardinalities, discrete_cardinalities)) for v in q) for q in queries]
    )
    if epsilon is None:
        noisy, budget, scale = exact, None, 0.0
    else:
        noisy, budget, scale = _noisy_entropies(exact, len(codes), epsilon, delta, count_share, noise)
    value = dict(zip(queries, np.clip(noisy, 0.0, ceilings), strict=True))

    def h(*variables: Variable) -> float:
        return float(value[tuple(sorted(_canonical(v, discretization) for v in variables))])

    target = np.zeros((m, m))
    inner = np.zeros((m, m))
    for i in range(m):
        for j in range(m):
            if i != j:
                target[i, j] = symmetrical_uncertainty(h((i, False)), h((j, True)), h((i, False), (j, True)))
                inner[i, j] = symmetrical_uncertainty(h((i, True)), h((j, True)), h((i, True), (j, True)))
    parents = greedy_cfs(target, inner, np.asarray(cardinalities), discrete_cardinalities, max_cost)
    return Structure(parents, topological_order(parents), budget, scale, len(queries))
