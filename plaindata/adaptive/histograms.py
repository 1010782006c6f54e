"""Adaptive histograms and direct data synthesis ("Synthetic Data via Differential Privacy").

All three algorithms walk a hierarchy (:mod:`.hierarchies`) level by level, so the noisy
counts of a whole level are drawn in one call:

* :func:`basic_histogram` (Figure 1): a node whose count plus Lap(1/eps) reaches ``threshold`` is
  split into all its children (empty ones too: skipping them would reveal emptiness), down to
  ``max_depth`` levels. A record meets one noisy count per level, and the parts of a level are
  disjoint (Theorem 1), so the tree costs eps * max_depth (Corollary 2). The noisy count that
  stopped a leaf is dropped as soon as the leaf is decided: the :class:`Tree` keeps the
  shape only, so no release path can reach those values (released, they would need their own
  accounting, up to one more eps per level for the improved tree's discounted counts); leaf
  counts come from :func:`measure_leaves`, which is accounted.
* :func:`improved_histogram` (Figure 2): before splitting, the first ``discount`` records of the
  node (in input order: the paper's Skip) are dropped. With discount t >= b + ln 2 / eps
  (b = threshold) the tree costs 2 eps whatever its depth (Theorem 3); the remark after it asks for
  b >= ln(branching) / eps, otherwise the recursion may not stop, and both are enforced.
* :func:`measure_leaves` (the Remark after Corollary 2): a second, static histogram over the
  leaves (they partition the domain) with Lap(1 / eps_measure), then that many representatives
  per leaf, placed uniformly in it, after centering the leaf counts on their noisy sum
  (:func:`synthesize_from_counts`, post-processing). Total cost: the tree's plus eps_measure.
* :func:`direct_synthesis` (Figures 3-4): the root gets a noisy total; each node with count >= 2
  splits it among its children's noisy counts, made to add up by :func:`center`; a node with
  count 1, or at ``max_depth``, emits its records. A record meets max_depth + 1 noisy counts
  (the total and one per level), each with scale (max_depth + 1) / eps: eps in all (the paper's
  R = maxdepth / eps when the total is given; here the total is measured too).
* :func:`choose_attribute` (Section 4.1): the attribute to refine, by the exponential mechanism
  on the imbalance score Imb(A, D) = max_a |{x in D : A(x) = a}| (equation 8, sensitivity 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from petlab.plaindata.dp.noise import NoiseSource, OpenDPNoise
from petlab.plaindata.dp.privacy_cost import PrivacyCost


@dataclass
class Tree:
    """Nodes of an adaptive histogram; node 0 is the root, children are contiguous."""

    parent: list[int]
    child_index: list[int]
    depth: list[int]
    first_child: list[int]
    leaves: set[int]  # the leaf nodes (shape only: the noisy counts that stopped them are not kept)

    def path(self, node: int) -> tuple[int, ...]:
        out = []
        while node > 0:
            out.append(self.child_index[node])
            node = self.parent[node]
        return tuple(reversed(out))

    def leaf_paths(self) -> list[tuple[int, ...]]:
        return [self.path(node) for node in sorted(self.leaves)]


def default_threshold(epsilon: float, branching: int) -> float:
    """The split threshold the CLI and experiments use: ln(branching) / eps + 1, just above the
    floor ln(branching) / eps that :func:`improved_histogram` requires (Theorem 3's remark)."""
    _check_epsilon(epsilon)
    return math.log(branching) / epsilon + 1


def basic_cost(epsilon: float, depth: int) -> PrivacyCost:
    """Figure 1: a noisy count per level of the path a record follows (Corollary 2's e^{eps B})."""
    return PrivacyCost(
        epsilon * depth, 0.0, f"basic adaptive histogram (Figure 1, depth {depth})", "Corollary 2"
    )


def improved_cost(epsilon: float) -> PrivacyCost:
    """Figure 2 with the discount of Theorem 3: 2 eps whatever the depth."""
    return PrivacyCost(2 * epsilon, 0.0, "improved adaptive histogram (Figure 2)", "Theorem 3")


def leaf_measurement_cost(epsilon: float) -> PrivacyCost:
    """One Laplace count per leaf; the leaves partition the domain (parallel composition)."""
    return PrivacyCost(epsilon, 0.0, "leaf re-measurement", "Laplace mechanism over a partition")


def direct_synthesis_cost(epsilon: float, depth: int) -> PrivacyCost:
    """Figures 3-4: the noisy total and one noisy count per level, each Lap((depth + 1) / eps) on
    disjoint nodes within a level: eps in all (module docstring); sampling is post-processing."""
    return PrivacyCost(
        epsilon,
        0.0,
        f"direct synthesis (Figures 3-4, max depth {depth})",
        "depth + 1 measurements of eps/(depth + 1)",
    )


def _check_epsilon(epsilon: float) -> None:
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")


def _grow(records, domain, epsilon, threshold, max_depth, discount, noise, max_nodes) -> Tree:
    prepared = domain.prepare(records)
    tree = Tree(parent=[-1], child_index=[-1], depth=[0], first_child=[-1], leaves=set())
    node_of_record = np.zeros(len(prepared), dtype=np.int64)  # -1 once skipped
    active = np.array([0])
    for level in range(max_depth + 1):
        present = node_of_record >= 0
        counts = np.bincount(node_of_record[present], minlength=len(tree.parent))[active]
        noisy = noise.laplace(counts.astype(float), 1.0 / epsilon)
        splittable = np.array([not domain.is_terminal(tree.child_index[n]) for n in active], dtype=bool)
        split = (noisy >= threshold) & splittable & (level < max_depth)
        tree.leaves.update(int(node) for node in active[~split])  # the noisy values stay here
        if not split.any():
            break
        splitting = active[split]
        if len(tree.parent) + len(splitting) * domain.branching > max_nodes:
            raise RuntimeError(f"the histogram would exceed {max_nodes} nodes; raise the threshold")
        first = len(tree.parent)
        for i, node in enumerate(splitting):
            tree.first_child[node] = first + i * domain.branching
        for node in splitting:
            for child in range(domain.branching):
                tree.parent.append(int(node))
                tree.child_index.append(child)
                tree.depth.append(level + 1)
                tree.first_child.append(-1)
        first_child = np.asarray(tree.first_child)
        moving = np.flatnonzero(present & np.isin(node_of_record, splitting))
        if discount:  # Skip(discount): the first `discount` present records of each split node
            nodes = node_of_record[moving]
            order = np.argsort(nodes, kind="stable")
            sorted_nodes = nodes[order]
            rank = np.arange(len(order)) - np.searchsorted(sorted_nodes, sorted_nodes, side="left")
            skipped = moving[order[rank < discount]]
            node_of_record[skipped] = -1
            moving = np.setdiff1d(moving, skipped, assume_unique=True)
        node_of_record[moving] = first_child[node_of_record[moving]] + domain.child(prepared[moving], level)
        active = np.arange(first, len(tree.parent))
    return tree


def basic_histogram(
    records,
    domain,
    epsilon: float,
    threshold: float,
    max_depth: int,
    noise: NoiseSource | None = None,
    max_nodes: int = 2_000_000,
) -> Tree:
    """Figure 1; (epsilon * max_depth)-DP, counting the root's level as one."""
    _check_epsilon(epsilon)
    if max_depth < 1:
        raise ValueError("max_depth is at least 1")
    return _grow(records, domain, epsilon, threshold, max_depth - 1, 0, noise or OpenDPNoise(), max_nodes)


def improved_discount(epsilon: float, threshold: float) -> int:
    """The smallest integer discount allowed by Theorem 3: t >= b + ln 2 / eps."""
    return math.ceil(threshold + math.log(2) / epsilon)


def improved_histogram(
    records,
    domain,
    epsilon: float,
    threshold: float,
    discount: int | None = None,
    noise: NoiseSource | None = None,
    max_depth: int = 64,
    max_nodes: int = 2_000_000,
) -> Tree:
    """Figure 2; 2 * epsilon-DP for any depth (Theorem 3). ``max_depth`` only bounds the work
    (for continuous data a node never runs out of levels); privacy does not depend on it."""
    _check_epsilon(epsilon)
    discount = improved_discount(epsilon, threshold) if discount is None else discount
    if discount < threshold + math.log(2) / epsilon:
        raise ValueError(
            f"Theorem 3 needs discount >= threshold + ln 2 / eps = {threshold + math.log(2) / epsilon}"
        )
    if threshold < math.log(domain.branching) / epsilon:
        raise ValueError(
            f"threshold below ln(branching) / eps = {math.log(domain.branching) / epsilon:.3g}: "
            "the recursion may not terminate (remark after Theorem 3)"
        )
    return _grow(records, domain, epsilon, threshold, max_depth, discount, noise or OpenDPNoise(), max_nodes)


def leaf_of_records(records, domain, tree: Tree) -> np.ndarray:
    """The leaf each record falls in (the leaves partition the domain)."""
    prepared = domain.prepare(records)
    first_child = np.asarray(tree.first_child)
    node = np.zeros(len(prepared), dtype=np.int64)
    for level in range(max(tree.depth) + 1):
        inner = first_child[node] >= 0
        if not inner.any():
            break
        node[inner] = first_child[node[inner]] + domain.child(prepared[inner], level)
    return node


def measure_leaves(
    records, domain, tree: Tree, epsilon: float, noise: NoiseSource | None = None
) -> dict[tuple[int, ...], float]:
    """The second pass: Lap(1 / epsilon) counts of all records over the leaves (epsilon-DP)."""
    _check_epsilon(epsilon)
    leaves = np.array(sorted(tree.leaves))
    counts = np.bincount(leaf_of_records(records, domain, tree), minlength=len(tree.parent))[leaves]
    noisy = (noise or OpenDPNoise()).laplace(counts.astype(float), 1.0 / epsilon)
    return {tree.path(int(node)): float(value) for node, value in zip(leaves, noisy, strict=True)}


def synthesize_from_counts(
    domain, counts: dict[tuple[int, ...], float], rng: np.random.Generator, centered: bool = True
):
    """Representatives per leaf, uniform in it (post-processing of the noisy leaf counts).

    ``centered`` (the default): the leaves' counts are centered (Figure 4's :func:`center`) on
    round(max(0, sum of the noisy counts)), itself an unbiased noisy total, so the number of
    synthetic points tracks the real count. Without it, round(max(0, count)) per leaf, as the
    paper's re-measurement is written: every empty leaf whose noise comes out positive adds
    points and none takes any away, so the output grows by about (leaves) x scale / 2 (at
    eps 0.1, scale 10, 51,337 points for 20,000 real ones)."""
    paths = list(counts)
    values = np.array([counts[p] for p in paths], dtype=float)
    if centered and len(values):
        total = int(max(0, round(float(values.sum()))))
        allocation = center(total, values, rng)
    else:
        allocation = np.array([max(0, round(v)) for v in values], dtype=np.int64)
    return domain.collect(
        [domain.sample(p, int(a), rng) for p, a in zip(paths, allocation, strict=True) if a > 0]
    )


def center(count: int, subcounts, rng: np.random.Generator) -> np.ndarray:
    """Figure 4 (with Figure 14's clamp to [0, count]): move the subcounts one unit at a time,
    round-robin from a random start, until they add up to ``count``."""
    values = np.clip(np.rint(np.asarray(subcounts, dtype=float)), 0, count).astype(np.int64)
    if count < 0:
        raise ValueError("count must be non-negative")
    k = len(values)
    start = int(rng.integers(k))
    while (gap := count - int(values.sum())) != 0:
        direction = 1 if gap > 0 else -1
        rotation = np.roll(np.arange(k), -start)
        movable = rotation[values[rotation] < count] if direction > 0 else rotation[values[rotation] > 0]
        step = movable[: abs(gap)] if abs(gap) < len(movable) else movable
        values[step] += direction
        start = (int(step[-1]) + 1) % k if abs(gap) < len(movable) else start
    return values


def direct_synthesis(
    records,
    domain,
    epsilon: float,
    max_depth: int,
    rng: np.random.Generator,
    noise: NoiseSource | None = None,
):
    """Figures 3-4; epsilon-DP (module docstring). Returns synthetic records."""
    _check_epsilon(epsilon)
    if max_depth < 1:
        raise ValueError("max_depth is at least 1")
    noise = noise or OpenDPNoise()
    prepared = domain.prepare(records)
    scale = (max_depth + 1) / epsilon
    total = int(max(0, round(float(noise.laplace(np.array([float(len(prepared))]), scale)[0]))))
    # frontier: (path, allocated count, record indices)
    frontier: list[tuple[tuple[int, ...], int, np.ndarray]] = [((), total, np.arange(len(prepared)))]
    out: list = []
    for level in range(max_depth + 1):
        splitting = []
        for path, count, members in frontier:
            terminal = bool(path) and domain.is_terminal(path[-1])
            if count == 0:
                continue
            if count == 1 or level == max_depth or terminal:
                out.append(domain.sample(path, count, rng))
            else:
                splitting.append((path, count, members))
        if not splitting:
            break
        children = [domain.child(prepared[members], level) for _, _, members in splitting]
        true_counts = np.concatenate([np.bincount(c, minlength=domain.branching) for c in children])
        noisy = noise.laplace(true_counts.astype(float), scale).reshape(len(splitting), domain.branching)
        frontier = []
        for (path, count, members), child, sub in zip(splitting, children, noisy, strict=True):
            allocation = center(count, sub, rng)
            for index in np.flatnonzero(allocation):
                frontier.append(((*path, int(index)), int(allocation[index]), members[child == index]))
    return domain.collect(out)


def imbalance(frame: pd.DataFrame, attribute: str) -> int:
    """Equation 8: the size of the largest group of ``attribute``'s values."""
    return int(frame[attribute].value_counts().max()) if len(frame) else 0


def choose_attribute(
    frame: pd.DataFrame, attributes: list[str], epsilon: float, noise: NoiseSource | None = None
) -> str:
    """Section 4.1: an attribute chosen with the exponential mechanism on the imbalance score
    (sensitivity 1), epsilon-DP. OpenDP's report-noisy-max with exponential noise of scale
    2 / epsilon (the permute-and-flip form of the exponential mechanism) does the choosing."""
    _check_epsilon(epsilon)
    if not attributes:
        raise ValueError("no attribute to choose from")
    scores = np.array([imbalance(frame, a) for a in attributes], dtype=float)
    return attributes[(noise or OpenDPNoise()).noisy_max(scores, 2.0 / epsilon)]
