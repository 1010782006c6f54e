"""The OnTheMap release pipeline (Algorithms 1 and 2 with accept/reject) has exactly the law the
paper defines, on a geography small enough to enumerate; its building blocks agree with brute
force."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from onthemap_law import dirichlet_multinomial_logpmf
from scipy import stats

from petlab.plaindata.onthemap import release as release_module
from petlab.plaindata.onthemap.algorithm1 import polya_spread
from petlab.plaindata.onthemap.block_grid import MILES_PER_DEGREE_LATITUDE, BlockGrid
from petlab.plaindata.onthemap.coarsening import coarsen, refine
from petlab.plaindata.onthemap.privacy import (
    SLACK,
    gamma_good,
    union_tail_alphas,
)
from petlab.plaindata.onthemap.release import DistanceBands, release

ALPHA_TEST = 1e-6


def grid_from_miles(x, y, cell_miles=1.0) -> BlockGrid:
    """Blocks at (x, y) miles near the equator (cos(latitude) ~ 1)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    return BlockGrid.build(y / MILES_PER_DEGREE_LATITUDE, x / MILES_PER_DEGREE_LATITUDE, cell_miles)


def chi_square_pvalue(observed: Counter, expected: dict, draws: int) -> float:
    keys = sorted(expected, key=lambda o: -expected[o])
    big = [o for o in keys if expected[o] * draws >= 5]
    small = [o for o in keys if expected[o] * draws < 5]
    assert set(observed) <= set(expected), "an output the law gives probability 0"
    f_obs = [observed[o] for o in big] + ([sum(observed[o] for o in small)] if small else [])
    f_exp = [expected[o] * draws for o in big] + ([sum(expected[o] for o in small) * draws] if small else [])
    return stats.chisquare(f_obs, np.array(f_exp) * sum(f_obs) / sum(f_exp)).pvalue


def test_blocks_within_and_rings_match_brute_force():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0, 30, 400), rng.uniform(0, 20, 400)
    grid = grid_from_miles(x, y, cell_miles=2.0)
    cells = grid.cell_of_block[:25]
    for radius in (0, 1, 3, 8, 40):
        rings = grid.ring(cells[:, None], grid.cell_of_block[None, :])
        assert grid.blocks_within(cells, radius).tolist() == (rings < radius).sum(1).tolist()


def test_sample_rings_is_uniform_on_the_ring():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(0, 12, 300), rng.uniform(0, 12, 300)
    grid = grid_from_miles(x, y)
    cell = grid.cell_of_block[0]
    members = np.flatnonzero(
        (grid.ring(cell, grid.cell_of_block) >= 2) & (grid.ring(cell, grid.cell_of_block) < 5)
    )
    draws = grid.sample_rings(np.full(20000, cell), 2, 5, np.random.default_rng(2))
    assert set(draws.tolist()) <= set(members.tolist())
    counts = np.array([np.sum(draws == m) for m in members])
    assert stats.chisquare(counts).pvalue > ALPHA_TEST
    with pytest.raises(ValueError, match="no block"):
        grid.sample_rings(np.array([cell]), 500, 501, rng)


def test_polya_spread_is_dirichlet_multinomial_for_every_group():
    """Sorted block sizes of each group against dense Dirichlet-multinomial draws."""
    workers, blocks, alpha = np.array([4, 0, 3, 5]), np.array([3, 2, 6, 2]), np.array([0.4, 1.0, 2.0, 0.7])
    draws = 20000
    rng, dense_rng = np.random.default_rng(3), np.random.default_rng(4)
    sparse = [Counter() for _ in workers]
    for _ in range(draws):
        group, size = polya_spread(workers, blocks, alpha, rng)
        for g in range(len(workers)):
            sparse[g][tuple(sorted(size[group == g].tolist()))] += 1
    for g, (w, k, a) in enumerate(zip(workers, blocks, alpha, strict=True)):
        dense = Counter()
        for _ in range(draws):
            counts = dense_rng.multinomial(w, dense_rng.dirichlet(np.full(k, a)))
            dense[tuple(sorted(int(c) for c in counts if c))] += 1
        outcomes = sorted(set(sparse[g]) | set(dense))
        if len(outcomes) == 1:
            assert w == 0 and outcomes == [()]
            continue
        table = np.array([[sparse[g][o] for o in outcomes], [dense[o] for o in outcomes]])
        assert stats.chi2_contingency(table).pvalue > ALPHA_TEST


# A geography to enumerate: destination block 0 at the centre of cell (0, 0); band 0 (rings 0-1)
# holds blocks 0, 1, 2; band 1 (rings 2-3) holds blocks 3, 4, 5; blocks 6 and 7 lie beyond the
# domain (they also pin the grid's corner at 0 miles, so every block sits mid-cell).
X = [0.5, 1.5, 0.5, 2.5, 3.5, 2.5, 0.0, 9.5]
Y = [0.5, 0.5, 1.5, 0.5, 3.5, 2.5, 9.5, 0.0]
BANDS = DistanceBands(edges_miles=(0.0, 2.0, 4.0), keep=(1.0, 0.5))


def exact_release_law(
    counts: np.ndarray, alpha: float, gamma: float, keep_band_1: float, beyond: int = 1
) -> dict:
    """The paper's law with the beyond cell (``release``'s docstring): cells are the six domain
    blocks and B (``beyond`` real workers, prior N / gamma); Algorithm 2 keeps the empty band-1
    blocks, Algorithm 1 draws N workers on the kept cells, and accept/reject on gamma-Good redraws
    both; the output is the six blocks' counts (B dropped)."""
    real = np.r_[counts, beyond]
    total = int(real.sum())
    priors = np.r_[np.full(6, alpha), total / gamma]
    base: dict = {}
    empty_far = [i for i in (3, 4, 5) if counts[i] == 0]
    for kept in itertools.product([False, True], repeat=len(empty_far)):
        weight = math.prod(keep_band_1 if k else 1 - keep_band_1 for k in kept)
        cells = [i for i in range(7) if i not in empty_far or kept[empty_far.index(i)]]
        for output in _compositions(total, len(cells)):
            full = np.zeros(7, dtype=int)
            full[cells] = output
            p = math.exp(dirichlet_multinomial_logpmf(np.array(output), real[cells], priors[cells]))
            base[tuple(full)] = base.get(tuple(full), 0.0) + weight * p
    good = {m: gamma_good(real, np.array(m), priors, gamma) for m in base}
    accepted = sum(p for m, p in base.items() if good[m])
    law: dict = {}
    for m, p in base.items():
        if good[m] and p > 0:
            law[m[:6]] = law.get(m[:6], 0.0) + p / accepted
    return law


def _compositions(total, parts):
    for cut in itertools.combinations(range(total + parts - 1), parts - 1):
        edges = (-1, *cut, total + parts - 1)
        yield [edges[i + 1] - edges[i] - 1 for i in range(parts)]


def test_release_has_the_papers_law_on_an_enumerable_geography():
    grid = grid_from_miles(X, Y)
    assert grid.blocks_within(grid.cell_of_block[:1], 2)[0] == 3
    assert grid.blocks_within(grid.cell_of_block[:1], 4)[0] == 6
    # destination 0: two workers from block 1, one from block 3, one from beyond the domain (cell B)
    destination, origin, count = np.array([0, 0, 0]), np.array([1, 3, 6]), np.array([2, 1, 1])
    epsilon, delta = 1.2, 0.3
    rng = np.random.default_rng(7)
    draws = 3000
    observed: Counter = Counter()
    first = None
    for _ in range(draws):
        out = release(destination, origin, count, grid, epsilon, delta, BANDS, rng=rng)
        first = first or out
        full = np.zeros(6, dtype=int)
        for o, c in zip(out.origin, out.count, strict=True):
            full[o] += c
        assert set(out.destination.tolist()) <= {0} and len(set(out.origin.tolist())) == len(out.origin)
        observed[tuple(full)] += 1
    assert first.stats.beyond_pairs == 1 and first.stats.workers == 4  # N(d): the public total
    assert first.stats.inside_workers == 3
    alpha = float(first.alpha[0])
    gamma = math.expm1(epsilon)
    counts = np.array([0, 2, 0, 1, 0, 0])
    law = exact_release_law(counts, alpha, gamma, keep_band_1=0.5)
    assert sum(law.values()) == pytest.approx(1.0)
    assert chi_square_pvalue(observed, law, draws) > ALPHA_TEST
    # power: keeping every empty block (no Algorithm 2) is a detectably different law
    assert chi_square_pvalue(observed, exact_release_law(counts, alpha, gamma, 1.0), draws) < ALPHA_TEST


def test_release_at_scale_is_well_formed():
    from petlab.plaindata.onthemap.commute_data import generate

    data = generate(3000, seed=2)
    index = {b: i for i, b in enumerate(data.crosswalk.tabblk2010)}
    grid = BlockGrid.build(data.crosswalk.blklatdd.to_numpy(), data.crosswalk.blklondd.to_numpy())
    d = data.od.w_geocode.map(index).to_numpy()
    o = data.od.h_geocode.map(index).to_numpy()
    out = release(d, o, data.od.S000.to_numpy(), grid, 4.6, 1e-5, rng=np.random.default_rng(0))
    pairs = set(zip(out.destination.tolist(), out.origin.tolist(), strict=True))
    assert len(pairs) == len(out.count) and (out.count > 0).all()
    true_totals = np.bincount(d, weights=data.od.S000.to_numpy(), minlength=grid.blocks)
    synthetic_totals = np.bincount(out.destination, weights=out.count, minlength=grid.blocks)
    # N(d) synthetic workers per destination, those drawn beyond the last band not written
    assert (synthetic_totals <= true_totals).all()
    assert synthetic_totals.sum() + out.stats.synthetic_beyond_workers == true_totals.sum()
    assert set(out.destinations.tolist()) == set(d.tolist())  # destinations all beyond included
    ring = grid.ring(grid.cell_of_block[out.destination], grid.cell_of_block[out.origin])
    assert ring.max() < DistanceBands().ring_edges(1.0)[-1]
    assert out.privacy.epsilon == pytest.approx(
        4.6 - math.log1p(-1e-5) + math.log(1 / 0.0378) + math.log(2) * out.priors.max_ceil_alpha
    )
    assert out.privacy.delta == 1e-5 and out.privacy.notion == "probabilistic DP"
    assert "epsilon'" in "\n".join(out.privacy.lines())


def test_release_rejects_bad_input():
    grid = grid_from_miles(X, Y)
    with pytest.raises(ValueError, match="ln 3"):
        release([0], [1], [1], grid, 1.0, 1e-5)
    with pytest.raises(ValueError, match="positive count"):
        release([0], [1], [0], grid, 4.6, 1e-5)
    with pytest.raises(ValueError, match="grid's blocks"):
        release([0], [99], [1], grid, 4.6, 1e-5)
    with pytest.raises(ValueError, match="no O/D pairs"):
        release([], [], [], grid, 4.6, 1e-5)
    with pytest.raises(ValueError, match="keep"):
        DistanceBands(edges_miles=(0.0, 1.0), keep=(0.0,))


def test_coarsening_refines_proportionally_to_public_weights():
    part_of_block = np.array([0, 0, 0, 1, 1, 2])
    weight = np.array([1.0, 2.0, 3.0, 0.0, 5.0, 1.0])
    assert coarsen(np.array([5, 0, 4]), part_of_block).tolist() == [2, 0, 1]
    blocks = refine(np.zeros(30000, dtype=int), part_of_block, weight, np.random.default_rng(0))
    counts = np.bincount(blocks, minlength=6)
    assert counts[3:].sum() == 0
    assert stats.chisquare(counts[:3], 30000 * np.array([1, 2, 3]) / 6).pvalue > ALPHA_TEST
    assert set(refine(np.array([1, 1, 1]), part_of_block, weight, np.random.default_rng(1))) == {4}
    with pytest.raises(ValueError, match="zero weight"):
        refine(np.array([1]), part_of_block, np.array([1, 1, 1, 0, 0, 1.0]), np.random.default_rng(0))


def _one_destination_with_far_empty_blocks():
    """A destination with 60 one-worker origin blocks within 1.5 miles
    and 5,000 empty blocks 120 to 190 miles away (kept by Algorithm 2 with probability 0.0378)."""
    rng = np.random.default_rng(1)
    near = rng.uniform(-1.4, 1.4, size=(60, 2))
    angle, radius = rng.uniform(0, 2 * np.pi, 5000), rng.uniform(120, 190, 5000)
    far = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    points = np.vstack([[[0.0, 0.0]], near, far])
    grid = grid_from_miles(points[:, 0], points[:, 1])
    return grid, np.zeros(60, dtype=int), np.arange(1, 61), np.ones(60, dtype=int)


def _disclosure_rate(grid, destination, origin, count, draws: int, seed: int) -> float:
    """How often the release leaves gamma-Rep of the real data (the disclosure event the delta of
    Theorems 4.3-4.4 and Lemma 5.2 bounds): some block holds more than gamma (alpha + [n_i - 1]^+)
    synthetic workers. A one-worker block over gamma alpha is such a disclosure: move that worker
    and the output is rejected by accept/reject with probability 1."""
    epsilon, delta = 4.6, 1e-5
    gamma, rng = math.expm1(epsilon), np.random.default_rng(seed)
    real = np.zeros(grid.blocks, dtype=int)
    np.add.at(real, origin, count)
    bad = 0
    for _ in range(draws):
        out = release(destination, origin, count, grid, epsilon, delta, rng=rng)
        synthetic = np.zeros(grid.blocks, dtype=int)
        np.add.at(synthetic, out.origin, out.count)
        bad += bool((synthetic > SLACK * gamma * (out.alpha[0] + np.maximum(real - 1, 0))).any())
    return bad / draws


def test_delta_holds_for_the_shrunk_domain(monkeypatch):
    """Attack: with the prior chosen for the full 5,061-block domain, Algorithm 1
    and accept/reject on the shrunk domain (about 250 blocks) disclose in several percent of
    releases at delta 1e-5 (measured 3.7% there, 7.7% here). With the prior chosen for the kept
    domain's public lower bound, no disclosure in 250 releases (at delta 1e-5 the chance of
    seeing one is at most 0.25%)."""
    grid, destination, origin, count = _one_destination_with_far_empty_blocks()
    assert _disclosure_rate(grid, destination, origin, count, 250, seed=1) == 0.0

    def full_domain_prior(n, band_blocks, keep, epsilon, delta):  # the prior for the full domain
        return union_tail_alphas(n, np.maximum(band_blocks.sum(axis=1), 2), epsilon, delta)

    monkeypatch.setattr(release_module, "choose_alphas", full_domain_prior)
    assert _disclosure_rate(grid, destination, origin, count, 150, seed=1) > 0.02
