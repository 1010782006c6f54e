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
   those workers is a Dirichlet-multinomial draw, done as a Pólya urn: the next worker starts a new
   empty block with probability alpha (k_e - u) / (alpha k_e + t) (u blocks used so far, t workers
   placed), or joins used block j with probability (alpha + c_j) / (alpha k_e + t); a new block is
   a uniform choice among the unused empty ones (rejection sampling, cheap while u << k_e).

The result has exactly the distribution of the dense algorithm (``tests/test_onthemap.py``).
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
    for block, count in _polya_spread(int(drawn[-1]), empty, alpha, set(origins.tolist()), domain_size, rng):
        result[block] = count
    return result


def _polya_spread(
    workers: int, empty: int, alpha: float, occupied: set[int], domain_size: int, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """Dirichlet-multinomial(workers; alpha, ..., alpha over the empty blocks), sparsely."""
    used_blocks: list[int] = []
    used_counts: list[int] = []
    taken = set(occupied)
    for placed in range(workers):
        new_weight = alpha * (empty - len(used_blocks))
        if rng.random() * (alpha * empty + placed) < new_weight:
            while True:  # a uniform unused empty block
                block = int(rng.integers(domain_size))
                if block not in taken:
                    break
            taken.add(block)
            used_blocks.append(block)
            used_counts.append(1)
        else:
            weights = alpha + np.asarray(used_counts, dtype=float)
            j = int(np.searchsorted(np.cumsum(weights), rng.random() * weights.sum(), side="right"))
            used_counts[min(j, len(used_counts) - 1)] += 1
    return list(zip(used_blocks, used_counts, strict=True))


def synthesize_destination_dense(
    counts: np.ndarray, alpha: float, m: int, rng: np.random.Generator
) -> np.ndarray:
    """The textbook O(k) form of Algorithm 1, for tests and small domains."""
    p = rng.dirichlet(np.asarray(counts, dtype=float) + alpha)
    return rng.multinomial(m, p)
