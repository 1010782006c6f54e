"""The OnTheMap release pipeline: Algorithms 1 and 2 with accept/reject over a whole O/D table.

Machanavajjhala et al., ICDE 2008, Sections III-VI, vectorised over all destinations. The data
owner publishes the number of workers of every destination, N(d) (Section IV: "a histogram of
destination blocks has already been published"); neighbouring data sets move one worker's origin
within its destination. Per destination d:

1. Domain (Section VI): the origin blocks within ``bands.edges_miles[-1]`` (200 miles in the
   paper), k(d) of them, read off the public
   :class:`petlab.plaindata.onthemap.block_grid.BlockGrid`, **plus one cell B for every origin
   beyond the last band**: the workers beyond are aggregated into B, never dropped, so every
   step below sees N(d), the public total, and not the number of workers inside the domain
   (were the workers beyond dropped, a worker crossing the edge would change n(d), the prior and
   the synthetic total).
2. Priors (public, chosen before shrinking, Section V-B): a uniform alpha(d) on the inside blocks,
   from N(d) and the band sizes (:func:`choose_alphas`), and alpha_B = N(d) / gamma on B
   (:func:`~petlab.plaindata.onthemap.privacy.beyond_prior`): gamma alpha_B = N(d), so B never
   leaves gamma-Rep.
3. Algorithm 2: an empty inside block of band b is kept with probability f_b, so the number kept
   per (destination, band) is one binomial draw; B and the non-empty blocks are always kept.
4. Algorithm 1, sparsely (:mod:`petlab.plaindata.onthemap.algorithm1`): one Gamma(n_i + alpha)
   per non-empty block, one Gamma(n_B + alpha_B) for B, one Gamma(K_b alpha) per band's kept empty
   blocks, a multinomial of N(d) by sequential binomials, and a Pólya urn per band
   (:func:`petlab.plaindata.onthemap.algorithm1.polya_spread`).
5. Accept/reject (Section V-A): a destination whose output is not gamma-Good (gamma = e^eps - 1,
   B included as a cell) is redrawn **from step 3**: a fresh kept domain and a fresh Algorithm 1.
6. Output: the inside cells; B's synthetic workers are dropped (post-processing: with N(d) public,
   m_B = N(d) - the written total anyway). New blocks are named uniformly among the band's blocks
   that are empty for d, distinct. The cost grows with the number of O/D pairs and synthetic
   workers, not with k(d).

Privacy: (eps', delta)-probabilistically DP per destination, for one worker's origin moved within
its destination (across the last band's edge too), with
eps' = eps + ln(1 / min f) + max_d ceil(alpha(d)) ln 2 - ln(1 - delta)
(:func:`petlab.plaindata.onthemap.statement.release_cost`). The proof (Theorem 4.3 with per-cell
priors, Theorem 5.2 for the shrinking, the probability of leaving gamma-Rep, Lemma 5.2 for the
whole pipeline) is on the documentation site: ``docs/explanation/proofs/onthemap.md``.
``tests/plaindata/onthemap/test_onthemap_exact_pipeline.py`` checks it on the pipeline's exact law.
Everything printed is a function of eps, delta, the bands and the priors, which depend on N(d) and
the geography only; figures computed from the data are confidential diagnostics
(:class:`ReleaseDiagnostics`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from petlab.plaindata.dp.privacy_cost import PrivacyCost
from petlab.plaindata.onthemap.algorithm1 import polya_spread
from petlab.plaindata.onthemap.block_grid import BlockGrid
from petlab.plaindata.onthemap.privacy import (
    beyond_prior,
    gamma_good_by_group,
    shrunk_domain_bounds,
    shrunk_union_tail_alphas,
)
from petlab.plaindata.onthemap.statement import DOMAIN_SHARE, TAIL_SHARE, PriorSummary, release_cost
from petlab.plaindata.secure_random import release_generator
from petlab.progress import bar


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
class ReleaseDiagnostics:
    """Figures computed from the data: confidential diagnostics (``petlab-synth onthemap
    --diagnostics`` writes them; nothing prints them). Workers and pairs "beyond" are those
    beyond the last band (the cell B of each destination)."""

    destinations: int
    input_pairs: int
    beyond_pairs: int
    beyond_workers: int
    workers: int  # the sum of the public N(d)
    inside_workers: int
    synthetic_beyond_workers: int
    max_domain: int  # the largest number of inside blocks of a destination
    mean_kept_empty_blocks: float  # per destination, of the accepted draw
    mean_prior_mass: float  # per destination, of the accepted draw's kept domain and B
    rejected_draws: int
    rounds: int
    synthetic_pairs: int
    workers_from_empty_blocks: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass
class OnTheMapRelease:
    destination: np.ndarray  # block index per synthetic O/D pair
    origin: np.ndarray
    count: np.ndarray
    privacy: PrivacyCost
    priors: PriorSummary
    destinations: np.ndarray  # the destination blocks, and
    alpha: np.ndarray  # the prior per inside origin block chosen for each (public: N(d), geography)
    stats: ReleaseDiagnostics  # confidential
    kept_domain: np.ndarray | None = None  # cells kept by Algorithm 2 per destination (confidential)


def _aggregate(destination, origin, count):
    destination, origin, count = (np.asarray(v, dtype=np.int64) for v in (destination, origin, count))
    if not destination.shape == origin.shape == count.shape or destination.ndim != 1:
        raise ValueError("destination, origin and count must be equal-length vectors")
    if (count < 1).any():
        raise ValueError("every O/D pair needs a positive count")
    keys, inverse = np.unique(np.stack([destination, origin]), axis=1, return_inverse=True)
    return keys[0], keys[1], np.bincount(inverse.ravel(), weights=count).astype(np.int64)


def choose_alphas(n: np.ndarray, band_blocks: np.ndarray, keep, epsilon: float, delta: float) -> np.ndarray:
    """alpha(d) for the inside blocks from the public N(d) and band sizes ``band_blocks[d, b]``
    (module docstring, step 2; the proof's (c): docs/explanation/proofs/onthemap.md)."""
    band_blocks = np.asarray(band_blocks)
    bounds = shrunk_domain_bounds(band_blocks, np.asarray(keep), DOMAIN_SHARE * delta)
    return shrunk_union_tail_alphas(n, bounds, epsilon, TAIL_SHARE * delta, band_blocks.sum(axis=1))


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
    """Synthetic O/D counts (block indices into ``grid``): N(d) synthetic workers per destination,
    those that land beyond the last band dropped (module docstring, steps 1 to 6)."""
    if not epsilon > math.log(3) or not 0 < delta < 1:
        raise ValueError("need epsilon > ln 3 (Theorem 4.4) and 0 < delta < 1")
    bands = bands or DistanceBands()
    rng = rng or release_generator()  # the caller passes a seeded generator for tests
    destination, origin, count = _aggregate(destination, origin, count)
    if not len(destination):
        raise ValueError("no O/D pairs to release")
    if max(destination.max(), origin.max()) >= grid.blocks:
        raise ValueError("block indices must refer to the grid's blocks")
    progress = bar(total=6, desc="onthemap", disable=not show_progress)
    ring_edges = bands.ring_edges(cell_miles)
    domains = _domains(grid, destination, origin, count, ring_edges)  # step 1
    progress.update()
    alpha = choose_alphas(domains.total, domains.band_blocks, bands.keep, epsilon, delta)  # step 2
    alpha_beyond = beyond_prior(domains.total, epsilon)
    progress.update()
    draws = _accept_reject(domains, alpha, alpha_beyond, bands.keep, epsilon, rng, max_rounds)  # 3-5
    progress.update()
    new_d, new_b, new_size = (np.concatenate([group[i] for group in draws.band_groups]) for i in range(3))
    new_origin = _name_new_blocks(  # step 6
        grid, domains.cells, new_d, new_b, ring_edges, domains.origin, domains.d_of_pair, rng
    )
    progress.update()
    kept_pairs = draws.pairs > 0  # the output: the inside pairs drawn, then the new blocks
    out_destination = np.concatenate([domains.blocks[domains.d_of_pair[kept_pairs]], domains.blocks[new_d]])
    out_origin = np.concatenate([domains.origin[kept_pairs], new_origin])
    out_count = np.concatenate([draws.pairs[kept_pairs], new_size])
    progress.update()
    progress.close()
    priors = PriorSummary.of(alpha)
    privacy = release_cost(epsilon, delta, bands.keep, bands.edges_miles[-1], priors)
    kept_domain = draws.kept.sum(axis=1) + domains.occupied.sum(axis=1)  # inside blocks; B besides
    diagnostics = _diagnostics(domains, draws, alpha * kept_domain + alpha_beyond, len(out_count), new_size)
    return OnTheMapRelease(
        out_destination,
        out_origin,
        out_count,
        privacy,
        priors,
        domains.blocks,
        alpha,
        diagnostics,
        kept_domain,
    )


@dataclass(frozen=True)
class _Domains:
    """Step 1: the destinations, their public totals N(d) and their domains; the pairs inside the
    last band (those beyond form each destination's cell B)."""

    blocks: np.ndarray  # the destination blocks
    cells: np.ndarray  # their grid cells
    total: np.ndarray  # N(d), public
    beyond: np.ndarray  # workers beyond the last band, per destination (B's count)
    beyond_pairs: int
    origin: np.ndarray  # the inside pairs: origin block, count, destination index, band
    count: np.ndarray
    d_of_pair: np.ndarray
    band: np.ndarray
    within: np.ndarray  # blocks within each band edge, (destinations, edges)
    band_blocks: np.ndarray  # inside blocks per band, (destinations, bands)
    occupied: np.ndarray  # non-empty inside blocks per band, (destinations, bands)


def _domains(grid: BlockGrid, destination, origin, count, ring_edges: np.ndarray) -> _Domains:
    blocks, d_of_all = np.unique(destination, return_inverse=True)
    d_of_all = d_of_all.ravel()
    n_dest = len(blocks)
    total = np.bincount(d_of_all, weights=count, minlength=n_dest).astype(np.int64)
    cell = grid.cell_of_block
    ring = grid.ring(cell[destination], cell[origin])
    inside = ring < ring_edges[-1]
    beyond = np.bincount(d_of_all[~inside], weights=count[~inside], minlength=n_dest).astype(np.int64)
    band = np.searchsorted(ring_edges, ring[inside], side="right") - 1
    cells = cell[blocks]
    within = np.stack([grid.blocks_within(cells, e) for e in ring_edges], axis=1)
    band_blocks = np.diff(within, axis=1)
    occupied = np.zeros(band_blocks.shape, dtype=np.int64)
    np.add.at(occupied, (d_of_all[inside], band), 1)
    return _Domains(
        blocks,
        cells,
        total,
        beyond,
        int((~inside).sum()),
        origin[inside],
        count[inside],
        d_of_all[inside],
        band,
        within,
        band_blocks,
        occupied,
    )


def _diagnostics(
    domains: _Domains, draws: _Draws, prior_mass: np.ndarray, synthetic_pairs: int, new_size: np.ndarray
) -> ReleaseDiagnostics:
    return ReleaseDiagnostics(
        destinations=len(domains.blocks),
        input_pairs=len(domains.origin) + domains.beyond_pairs,
        beyond_pairs=domains.beyond_pairs,
        beyond_workers=int(domains.beyond.sum()),
        workers=int(domains.total.sum()),
        inside_workers=int(domains.total.sum() - domains.beyond.sum()),
        synthetic_beyond_workers=int(draws.beyond.sum()),
        max_domain=int(domains.within[:, -1].max()),
        mean_kept_empty_blocks=float(draws.kept.sum(1).mean()),
        mean_prior_mass=float(prior_mass.mean()),
        rejected_draws=draws.rejected,
        rounds=draws.rounds,
        synthetic_pairs=synthetic_pairs,
        workers_from_empty_blocks=int(new_size.sum()),
    )


@dataclass
class _Draws:
    """Steps 3-5's accepted draws: synthetic workers per inside pair and in B, empty blocks kept
    per (destination, band), and the new blocks as (destination, band, size) groups."""

    pairs: np.ndarray
    beyond: np.ndarray
    kept: np.ndarray
    band_groups: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    rounds: int = 0
    rejected: int = 0


def _accept_reject(
    domains: _Domains,
    alpha: np.ndarray,
    alpha_beyond: np.ndarray,
    keep_probabilities: tuple[float, ...],
    epsilon: float,
    rng: np.random.Generator,
    max_rounds: int,
) -> _Draws:
    """Algorithm 2, Algorithm 1 and accept/reject; rejected destinations redrawn from step 3."""
    gamma, keep = math.expm1(epsilon), np.asarray(keep_probabilities)
    n_dest, n_bands = domains.band_blocks.shape
    empty_blocks = domains.band_blocks - domains.occupied
    d_of_pair, count, beyond = domains.d_of_pair, domains.count, domains.beyond
    draws = _Draws(
        np.zeros(len(count), dtype=np.int64),
        np.zeros(n_dest, dtype=np.int64),
        np.zeros((n_dest, n_bands), dtype=np.int64),
        [],
    )
    todo = np.arange(n_dest)
    while len(todo):
        draws.rounds += 1
        if draws.rounds > max_rounds:
            raise RuntimeError(f"accept/reject did not finish in {max_rounds} rounds")
        draws.kept[todo] = rng.binomial(empty_blocks[todo], keep[None, :])
        pair_sel = np.flatnonzero(np.isin(d_of_pair, todo))
        pair_d = d_of_pair[pair_sel]
        band_d = np.repeat(todo, n_bands)
        band_b = np.tile(np.arange(n_bands), len(todo))
        pair_drawn, beyond_drawn, group_of_block, sizes = _algorithm1(
            domains, pair_sel, todo, draws.kept[band_d, band_b], alpha, alpha_beyond, rng
        )
        block_d = band_d[group_of_block]
        good = gamma_good_by_group(
            np.concatenate([pair_d, todo, block_d]),
            np.concatenate([count[pair_sel], beyond[todo], np.zeros(len(sizes), dtype=np.int64)]),
            np.concatenate([pair_drawn, beyond_drawn, sizes]),
            alpha,
            gamma,
            n_dest,
            cell_alpha=np.concatenate([alpha[pair_d], alpha_beyond[todo], alpha[block_d]]),
        )
        draws.pairs[pair_sel[good[pair_d]]] = pair_drawn[good[pair_d]]
        draws.beyond[todo[good[todo]]] = beyond_drawn[good[todo]]
        keep_block = good[block_d]
        draws.band_groups.append((block_d[keep_block], band_b[group_of_block][keep_block], sizes[keep_block]))
        draws.rejected += int((~good[todo]).sum())
        todo = todo[~good[todo]]
    return draws


def _algorithm1(
    domains: _Domains,
    pair_sel: np.ndarray,
    todo: np.ndarray,
    band_k: np.ndarray,
    alpha: np.ndarray,
    alpha_beyond: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Step 4 for the destinations ``todo``, their inside pairs ``pair_sel`` and ``band_k`` kept
    empty blocks per (destination, band): synthetic workers per pair and in B, and the new
    blocks as (index into the (destination, band) groups, size)."""
    n_bands = domains.band_blocks.shape[1]
    pair_d = domains.d_of_pair[pair_sel]
    band_d = np.repeat(todo, n_bands)
    pair_shares = rng.gamma(domains.count[pair_sel] + alpha[pair_d])
    beyond_shares = rng.gamma(domains.beyond[todo] + alpha_beyond[todo])
    band_shares = np.where(band_k > 0, rng.gamma(np.maximum(band_k * alpha[band_d], 1e-300)), 0.0)
    groups = np.concatenate([pair_d, todo, band_d])
    order = np.argsort(groups, kind="stable")
    drawn = np.empty(len(groups), dtype=np.int64)
    drawn[order] = _multinomial_by_groups(
        domains.total, groups[order], np.concatenate([pair_shares, beyond_shares, band_shares])[order], rng
    )
    group_of_block, sizes = polya_spread(drawn[len(pair_sel) + len(todo) :], band_k, alpha[band_d], rng)
    return drawn[: len(pair_sel)], drawn[len(pair_sel) : len(pair_sel) + len(todo)], group_of_block, sizes


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
