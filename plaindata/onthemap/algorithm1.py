"""OnTheMap's synthesizer, Algorithm 1 (Machanavajjhala et al., ICDE 2008, Section III), sparse.

For one destination block with origin histogram n over k origin blocks and a uniform prior sample
alpha, Algorithm 1 draws p ~ Dirichlet(n + alpha) and m ~ Multinomial(p, m_total). Written densely
that costs O(k) per destination, and k reaches 233,726 blocks (Section VI). Here the cost grows
with the number of non-empty origin blocks and with m_total only:

1. A Dirichlet draw is a vector of independent Gamma(n_i + alpha) variables, normalised. The k - s
   empty blocks share the same shape alpha, and a sum of independent Gamma(alpha) variables is
   Gamma((k - s) alpha): the empty blocks' total share is one draw.
2. The multinomial over the s non-empty blocks plus that aggregate decides how many synthetic
   workers come from empty blocks.
3. Given the aggregate, the empty blocks' proportions are Dirichlet(alpha, ..., alpha), so spreading
   those workers is a Dirichlet-multinomial draw, done as a Pólya urn (:func:`polya_spread`): the
   next worker starts a new empty block with probability alpha (k_e - u) / (alpha k_e + t) (u blocks
   used so far, t workers placed), or joins used block j with probability
   (alpha + c_j) / (alpha k_e + t). The urn only decides how the workers group; which empty blocks
   they land in is a uniform choice of distinct unused ones (rejection sampling, cheap while
   u << k_e), since the empty blocks are exchangeable.

The result has exactly the distribution of the dense algorithm
(``tests/plaindata/onthemap/test_onthemap.py``).
"""

from __future__ import annotations

import numpy as np


def synthesize_destination(
    origins: np.ndarray,
    counts: np.ndarray,
    domain_size: int,
    alpha: float,
    m: int,
    rng: np.random.Generator,
) -> dict[int, int]:
    """Synthetic origin counts {origin block index: workers} for one destination.

    ``origins`` are the distinct non-empty origin block indices in [0, domain_size), ``counts``
    their worker counts; every origin block gets the prior sample ``alpha``.
    """
    origins = np.asarray(origins, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.float64)
    if origins.shape != counts.shape or len(np.unique(origins)) != len(origins):
        raise ValueError("origins must be distinct and match counts one to one")
    if len(origins) and (origins.min() < 0 or origins.max() >= domain_size):
        raise ValueError("origin indices must lie in [0, domain_size)")
    if alpha <= 0 or m < 0 or (counts < 0).any():
        raise ValueError("alpha must be positive, m and the counts non-negative")
    empty = domain_size - len(origins)
    shares = rng.gamma(counts + alpha)
    empty_share = rng.gamma(empty * alpha) if empty else 0.0
    total = shares.sum() + empty_share
    drawn = rng.multinomial(m, np.append(shares, empty_share) / total)
    result = {int(o): int(c) for o, c in zip(origins, drawn[:-1], strict=True) if c}
    _, sizes = polya_spread(np.array([drawn[-1]]), np.array([empty]), np.array([alpha]), rng)
    taken = set(result) | set(origins.tolist())
    for size in sizes:
        while True:  # a uniform unused empty block (rejection: cheap while few are used)
            block = int(rng.integers(domain_size))
            if block not in taken:
                break
        taken.add(block)
        result[block] = int(size)
    return result


def polya_spread(
    workers: np.ndarray, blocks: np.ndarray, alpha: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Dirichlet-multinomial(workers[g]; alpha[g] on each of blocks[g] blocks) for many groups at
    once, sparsely: returns (group of each used block, its worker count).

    A Pólya urn, vectorised over the groups with one step per worker index t: worker t of group
    g starts a new block with probability alpha (K - u) / (alpha K + t), copies the block of a
    uniformly chosen earlier worker with probability t / (alpha K + t), and otherwise joins a
    uniformly chosen used block (probability alpha u / (alpha K + t)); the last two together join
    used block j with probability (c_j + alpha) / (alpha K + t), as the urn requires.
    """
    workers = np.asarray(workers, dtype=np.int64)
    blocks = np.asarray(blocks, dtype=np.int64)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), workers.shape)
    if ((workers > 0) & (blocks < 1)).any():
        raise ValueError("a group with workers needs at least one block")
    base = np.zeros(len(workers), dtype=np.int64)
    np.cumsum(workers[:-1], out=base[1:])
    assignment = np.empty(int(workers.sum()), dtype=np.int64)  # block id (global) per worker
    used_ids = np.empty_like(assignment)  # the groups' used blocks, at base[g] + u
    used = np.zeros(len(workers), dtype=np.int64)
    next_id = 0
    active = np.flatnonzero(workers > 0)
    for t in range(int(workers.max(initial=0))):
        active = active[workers[active] > t]
        g = active
        total = alpha[g] * blocks[g] + t
        draw = rng.random(len(g)) * total
        new = draw < alpha[g] * (blocks[g] - used[g])
        copy = ~new & (draw < alpha[g] * (blocks[g] - used[g]) + t)
        chosen = np.empty(len(g), dtype=np.int64)
        fresh = np.arange(next_id, next_id + int(new.sum()))
        next_id += len(fresh)
        chosen[new] = fresh
        used_ids[base[g[new]] + used[g[new]]] = fresh
        if copy.any():
            gc = g[copy]
            chosen[copy] = assignment[base[gc] + (rng.random(len(gc)) * t).astype(np.int64)]
        other = ~new & ~copy
        if other.any():
            go = g[other]
            chosen[other] = used_ids[base[go] + (rng.random(len(go)) * used[go]).astype(np.int64)]
        used[g[new]] += 1
        assignment[base[g] + t] = chosen
    group_of_block = np.empty(next_id, dtype=np.int64)
    group_of_block[assignment] = np.repeat(np.arange(len(workers)), workers)
    return group_of_block, np.bincount(assignment, minlength=next_id)


def synthesize_destination_dense(
    counts: np.ndarray, alpha: float, m: int, rng: np.random.Generator
) -> np.ndarray:
    """The textbook O(k) form of Algorithm 1, for tests and small domains."""
    p = rng.dirichlet(np.asarray(counts, dtype=float) + alpha)
    return rng.multinomial(m, p)
