"""The OnTheMap release pipeline: Algorithms 1 and 2 with accept/reject over a whole O/D table.

Machanavajjhala et al., ICDE 2008, Sections III-VI, vectorised over all destinations:

1. Public domain (Section VI): the origin domain of destination d is every block within
   ``bands.edges_miles[-1]`` (200 miles in the paper; further O/D pairs are suppressed and
   counted). Its size k(d) is read off the :class:`petlab.plaindata.onthemap.block_grid.BlockGrid`.
2. Prior (Theorem 4.4, union-tail form, :mod:`petlab.plaindata.onthemap.privacy`): a uniform alpha(d)
   depending only on the public n(d) = m(d) and the public band sizes, chosen before shrinking as
   Section V-B requires, but for the domain that is actually sampled: Algorithm 1 and
   accept/reject run on the *shrunk* domain, where a block gets a larger share of the synthetic
   workers than in the full one, so a prior chosen for the full domain k(d) does not bound the
   probability of leaving gamma-Rep (issue 16 measured 3.7% of releases outside it at delta
   1e-5). Of the user's delta, 0.8 bounds that probability given a kept domain of at least k_low
   blocks with at most empty_high empty ones, and 0.1 each bounds the probability that the kept
   domain is smaller or has more empty blocks (public binomial bounds:
   :func:`~petlab.plaindata.onthemap.privacy.shrunk_domain_bounds`,
   :func:`~petlab.plaindata.onthemap.privacy.shrunk_union_tail_alphas`).
3. Algorithm 2: an empty origin block in distance band b is kept with probability f_b, so the
   number kept per (destination, band) is one binomial draw; the blocks themselves are only
   named if synthetic workers land in them (they are a uniform subset of the band's empty blocks).
4. Algorithm 1, sparsely (:mod:`petlab.plaindata.onthemap.algorithm1`): one Gamma(n_i + alpha) per non-empty
   origin, one Gamma(K_b alpha) per band's kept empty blocks, a multinomial by sequential
   binomials, and a Pólya urn per band (:func:`petlab.plaindata.onthemap.algorithm1.polya_spread`).
5. Accept/reject (Section V-A): destinations whose output is not gamma-Good are redrawn
   (Algorithm 1 only; the shrunk domain stays), gamma = e^eps - 1.
6. Named blocks: uniform, distinct, empty-for-d blocks of each band, drawn per destination cell.

The cost grows with the number of O/D pairs and of synthetic workers, not with k(d). Privacy
(:class:`OnTheMapPrivacy`): for every kept domain within the bounds, Algorithm 1 leaves gamma-Rep
with probability at most delta_tails = 0.8 delta, so with accept/reject (Lemma 5.2, derived in
``privacy``) eps_ar = eps - ln(1 - delta_tails) on gamma-Rep; Theorem 5.2's eps' on top of that for
the shrinking (composing its additive terms with eps_ar is this module's reading, not the paper's
statement). A release discloses (leaves gamma-Rep of the data on the kept domain) with
probability at most delta_tails + 2 x 0.1 delta = delta per destination, for every data set
(``tests/test_onthemap_release.py`` measures it on the configuration issue 16 found).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from petlab.plaindata.onthemap.algorithm1 import polya_spread
from petlab.plaindata.onthemap.block_grid import BlockGrid
from petlab.plaindata.onthemap.privacy import (
    accept_reject_epsilon,
    gamma_good_by_group,
    shrunk_domain_bounds,
    shrunk_epsilon,
    shrunk_union_tail_alphas,
)
from petlab.plaindata.secure_random import release_generator

TAIL_SHARE = 0.8  # of delta: leaving gamma-Rep on a kept domain within the bounds
DOMAIN_SHARE = 0.1  # of delta, for each of the two bounds on the kept domain


@dataclass(frozen=True)
class DistanceBands:
    """f_d of Algorithm 2 as a public step function of distance (edges in miles, one keep
    probability per band). The default follows Section VI: keep probabilities falling with the
    commute-distance histogram down to 0.0378, nothing beyond 200 miles."""

    edges_miles: tuple[float, ...] = (0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
    keep: tuple[float, ...] = (1.0, 0.6, 0.3, 0.15, 0.08, 0.05, 0.0378)

    def __post_init__(self) -> None:
        edges = np.asarray(self.edges_miles)
        if len(self.keep) != len(edges) - 1 or len(self.keep) == 0:
            raise ValueError("one keep probability per band: len(keep) == len(edges_miles) - 1")
        if edges[0] != 0 or (np.diff(edges) <= 0).any():
            raise ValueError("band edges start at 0 miles and increase")
        if not all(0 < f <= 1 for f in self.keep):
            raise ValueError("keep probabilities lie in (0, 1] (Theorem 5.2 divides by them)")

    def ring_edges(self, cell_miles: float) -> np.ndarray:
        """Band edges in grid rings (a block's ring is its Chebyshev cell distance)."""
        return np.ceil(np.asarray(self.edges_miles) / cell_miles).astype(np.int64)


@dataclass(frozen=True)
class OnTheMapPrivacy:
    epsilon: float
    delta: float
    epsilon_accept_reject: float
    epsilon_after_shrinking: float
    min_keep_probability: float
    max_ceil_alpha: int
    min_alpha: float

    def lines(self) -> list[str]:
        return [
            f"Algorithm 1 with the chosen priors: ({self.epsilon:g}, {self.delta:g})-probabilistic DP "
            "(Theorems 4.3-4.4, union-tail form, for the shrunk domain: "
            f"{TAIL_SHARE:g} delta tails + 2 x {DOMAIN_SHARE:g} delta domain-size bounds)",
            f"with accept/reject on gamma-Good, gamma = e^eps - 1 = {math.expm1(self.epsilon):.4g} "
            f"(Lemma 5.2, tails {TAIL_SHARE:g} delta on the kept domain): epsilon = "
            f"{self.epsilon_accept_reject:.6g}",
            f"with domain shrinking (Theorem 5.2; min f = {self.min_keep_probability:g}, "
            f"max ceil(alpha) = {self.max_ceil_alpha}): epsilon' = {self.epsilon_after_shrinking:.4f}, "
            f"delta = {self.delta:g}",
            f"smallest prior per origin block: alpha = {self.min_alpha:.5g}",
        ]


@dataclass
class OnTheMapRelease:
    destination: np.ndarray  # block index per synthetic O/D pair
    origin: np.ndarray
    count: np.ndarray
    privacy: OnTheMapPrivacy
    destinations: np.ndarray  # the destination blocks, and
    alpha: np.ndarray  # the prior per origin block chosen for each (Theorem 4.4, union-tail form)
    stats: dict[str, float] = field(default_factory=dict)  # confidential diagnostics
    kept_domain: np.ndarray | None = None  # blocks kept by Algorithm 2 per destination (confidential)


def _aggregate(destination, origin, count):
    destination, origin, count = (np.asarray(v, dtype=np.int64) for v in (destination, origin, count))
    if not destination.shape == origin.shape == count.shape or destination.ndim != 1:
        raise ValueError("destination, origin and count must be equal-length vectors")
    if (count < 1).any():
        raise ValueError("every O/D pair needs a positive count")
    keys, inverse = np.unique(np.stack([destination, origin]), axis=1, return_inverse=True)
    return keys[0], keys[1], np.bincount(inverse.ravel(), weights=count).astype(np.int64)


def choose_alphas(n: np.ndarray, band_blocks: np.ndarray, keep, epsilon: float, delta: float) -> np.ndarray:
    """alpha(d) from the public n(d) and band sizes ``band_blocks[d, b]`` (module docstring, step 2)."""
    bounds = shrunk_domain_bounds(band_blocks, np.asarray(keep), DOMAIN_SHARE * delta)
    return shrunk_union_tail_alphas(n, bounds, epsilon, TAIL_SHARE * delta)


def _multinomial_by_groups(
    totals: np.ndarray, group: np.ndarray, weight: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Multinomial(totals[g], weights of group g normalised), for entries sorted by group,
    by sequential conditional binomials, vectorised across groups."""
    starts = np.searchsorted(group, np.arange(len(totals)))
    position = np.arange(len(group)) - starts[group]
    remaining_weight = np.bincount(group, weights=weight, minlength=len(totals))
    remaining = totals.astype(np.int64).copy()
    drawn = np.zeros(len(group), dtype=np.int64)
    by_position = np.argsort(position, kind="stable")
    bounds = np.searchsorted(position[by_position], np.arange(position.max(initial=-1) + 2))
    for j in range(len(bounds) - 1):
        idx = by_position[bounds[j] : bounds[j + 1]]
        g = group[idx]
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(remaining_weight[g] > 0, weight[idx] / remaining_weight[g], 0.0)
        x = rng.binomial(remaining[g], np.clip(p, 0.0, 1.0))
        drawn[idx] = x
        remaining[g] -= x
        remaining_weight[g] -= weight[idx]
    return drawn


def release(
    destination,
    origin,
    count,
    grid: BlockGrid,
    epsilon: float,
    delta: float,
    bands: DistanceBands | None = None,
    cell_miles: float = 1.0,
    rng: np.random.Generator | None = None,
    show_progress: bool = False,
    max_rounds: int = 1000,
) -> OnTheMapRelease:
    """Synthetic O/D counts (block indices into ``grid``) with m(d) = n(d) per destination."""
    if not epsilon > math.log(3) or not 0 < delta < 1:
        raise ValueError("need epsilon > ln 3 (Theorem 4.4) and 0 < delta < 1")
    bands = bands or DistanceBands()
    rng = rng or release_generator()  # the caller passes a seeded generator for tests
    destination, origin, count = _aggregate(destination, origin, count)
    if len(destination) and max(destination.max(), origin.max()) >= grid.blocks:
        raise ValueError("block indices must refer to the grid's blocks")
    progress = tqdm(total=6, desc="onthemap", disable=not show_progress)
    ring_edges = bands.ring_edges(cell_miles)
    n_bands = len(bands.keep)

    # 1. domain: suppress pairs beyond the last band
    cell = grid.cell_of_block
    ring = grid.ring(cell[destination], cell[origin])
    inside = ring < ring_edges[-1]
    suppressed_pairs, suppressed_workers = int((~inside).sum()), int(count[~inside].sum())
    destination, origin, count, ring = destination[inside], origin[inside], count[inside], ring[inside]
    band = np.searchsorted(ring_edges, ring, side="right") - 1
    dest_blocks, d_of_pair = np.unique(destination, return_inverse=True)
    d_of_pair = d_of_pair.ravel()
    n_dest = len(dest_blocks)
    n_workers = np.bincount(d_of_pair, weights=count, minlength=n_dest).astype(np.int64)
    dest_cell = cell[dest_blocks]
    within = np.stack([grid.blocks_within(dest_cell, e) for e in ring_edges], axis=1)
    band_blocks = np.diff(within, axis=1)  # (n_dest, n_bands)
    domain = within[:, -1]
    progress.update()

    # 2. priors, before shrinking
    alpha = choose_alphas(n_workers, band_blocks, bands.keep, epsilon, delta)
    progress.update()

    # 3. Algorithm 2: kept empty blocks per (destination, band)
    occupied = np.zeros((n_dest, n_bands), dtype=np.int64)
    np.add.at(occupied, (d_of_pair, band), 1)
    kept = rng.binomial(band_blocks - occupied, np.asarray(bands.keep)[None, :])
    progress.update()

    # 4-5. Algorithm 1 with accept/reject
    gamma = math.expm1(epsilon)
    synthetic_pairs = np.zeros(len(destination), dtype=np.int64)
    band_groups: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (destination, band, size)
    todo = np.arange(n_dest)
    rounds = rejected = 0
    while len(todo):
        rounds += 1
        if rounds > max_rounds:
            raise RuntimeError(f"accept/reject did not finish in {max_rounds} rounds")
        pair_sel = np.flatnonzero(np.isin(d_of_pair, todo))
        pair_d = d_of_pair[pair_sel]
        pair_shares = rng.gamma(count[pair_sel] + alpha[pair_d])
        band_d = np.repeat(todo, n_bands)
        band_b = np.tile(np.arange(n_bands), len(todo))
        band_k = kept[band_d, band_b]
        band_shares = np.where(band_k > 0, rng.gamma(np.maximum(band_k * alpha[band_d], 1e-300)), 0.0)
        groups = np.concatenate([pair_d, band_d])
        order = np.argsort(groups, kind="stable")
        drawn = np.empty(len(groups), dtype=np.int64)
        drawn[order] = _multinomial_by_groups(
            n_workers, groups[order], np.concatenate([pair_shares, band_shares])[order], rng
        )
        pair_drawn, band_drawn = drawn[: len(pair_sel)], drawn[len(pair_sel) :]
        group_of_block, sizes = polya_spread(band_drawn, band_k, alpha[band_d], rng)

        block_d = band_d[group_of_block]
        good = gamma_good_by_group(
            np.concatenate([pair_d, block_d]),
            np.concatenate([count[pair_sel], np.zeros(len(sizes), dtype=np.int64)]),
            np.concatenate([pair_drawn, sizes]),
            alpha,
            gamma,
            n_dest,
        )
        accepted = todo[good[todo]]
        synthetic_pairs[pair_sel[good[pair_d]]] = pair_drawn[good[pair_d]]
        keep_block = good[block_d]
        band_groups.append((block_d[keep_block], band_b[group_of_block][keep_block], sizes[keep_block]))
        rejected += len(todo) - len(accepted)
        todo = todo[~good[todo]]
    progress.update()

    # 6. name the new blocks: distinct, empty for their destination, uniform in their band
    new_d = np.concatenate([g[0] for g in band_groups])
    new_b = np.concatenate([g[1] for g in band_groups])
    new_size = np.concatenate([g[2] for g in band_groups])
    new_origin = _name_new_blocks(grid, dest_cell, new_d, new_b, ring_edges, origin, d_of_pair, rng)
    progress.update()

    keep_pairs = synthetic_pairs > 0
    out_destination = np.concatenate([dest_blocks[d_of_pair[keep_pairs]], dest_blocks[new_d]])
    out_origin = np.concatenate([origin[keep_pairs], new_origin])
    out_count = np.concatenate([synthetic_pairs[keep_pairs], new_size])
    progress.update()
    progress.close()

    min_keep = min(bands.keep)
    eps_ar = accept_reject_epsilon(epsilon, TAIL_SHARE * delta)
    max_ceil_alpha = int(np.ceil(alpha).max()) if len(alpha) else 0
    privacy = OnTheMapPrivacy(
        epsilon=epsilon,
        delta=delta,
        epsilon_accept_reject=eps_ar,
        epsilon_after_shrinking=shrunk_epsilon(eps_ar, min_keep, max_ceil_alpha),
        min_keep_probability=min_keep,
        max_ceil_alpha=max_ceil_alpha,
        min_alpha=float(alpha.min()) if len(alpha) else float("nan"),
    )
    stats = {
        "destinations": n_dest,
        "input_pairs": len(destination) + suppressed_pairs,
        "suppressed_pairs": suppressed_pairs,
        "suppressed_workers": suppressed_workers,
        "workers": int(n_workers.sum()),
        "max_domain": int(domain.max()) if n_dest else 0,
        "mean_kept_empty_blocks": float(kept.sum(1).mean()) if n_dest else 0.0,
        "mean_prior_mass": float((alpha * (kept.sum(1) + (occupied.sum(1)))).mean()) if n_dest else 0.0,
        "rejected_draws": rejected,
        "rounds": rounds,
        "synthetic_pairs": len(out_count),
        "workers_from_empty_blocks": int(new_size.sum()),
    }
    kept_domain = kept.sum(axis=1) + occupied.sum(axis=1)
    return OnTheMapRelease(
        out_destination, out_origin, out_count, privacy, dest_blocks, alpha, stats, kept_domain
    )


def _name_new_blocks(grid, dest_cell, new_d, new_b, ring_edges, origin, d_of_pair, rng) -> np.ndarray:
    """Origin block for every new synthetic block (module docstring, step 6): uniform in its band,
    redrawn while it is non-empty for its destination or already named for it."""
    n_blocks = np.int64(grid.blocks)
    taken = np.sort(d_of_pair.astype(np.int64) * n_blocks + origin)
    out = np.full(len(new_d), -1, dtype=np.int64)
    pending = np.arange(len(new_d))
    while len(pending):
        out[pending] = grid.sample_rings(
            dest_cell[new_d[pending]], ring_edges[new_b[pending]], ring_edges[new_b[pending] + 1], rng
        )
        key = new_d * n_blocks + out
        position = np.minimum(np.searchsorted(taken, key), len(taken) - 1)
        clash = taken[position] == key if len(taken) else np.zeros(len(key), dtype=bool)
        first = np.zeros(len(key), dtype=bool)
        first[np.unique(key, return_index=True)[1]] = True
        pending = np.flatnonzero(clash | ~first)
    return out
