"""Domain coarsening by a public partition (ICDE 2008, Section V-B, Theorem 5.1).

Origin blocks are merged into the parts of a partition chosen from public data (the paper suggests
a previous release); the synthesizer then runs on parts instead of blocks, with the same privacy
parameters (Theorem 5.1: the partition is data-independent, so the mechanism on the coarse
domain is the same kind of mechanism on a smaller domain). To map a synthetic worker back to a
point, a block inside its part is drawn with probability proportional to a public weight (the
paper: "a density function derived from external data (such as publicly available population
density information)"); that step reads no confidential data and so costs no privacy.
"""

from __future__ import annotations

import numpy as np


def coarsen(blocks: np.ndarray, part_of_block: np.ndarray) -> np.ndarray:
    """The part of each block index."""
    blocks = np.asarray(blocks, dtype=np.int64)
    if len(blocks) and (blocks.min() < 0 or blocks.max() >= len(part_of_block)):
        raise ValueError("block indices must refer to the partition's blocks")
    return np.asarray(part_of_block, dtype=np.int64)[blocks]


def refine(
    parts: np.ndarray, part_of_block: np.ndarray, weight: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One block per entry of ``parts``, drawn within its part with probability proportional to
    the public ``weight`` of the part's blocks."""
    part_of_block = np.asarray(part_of_block, dtype=np.int64)
    weight = np.asarray(weight, dtype=float)
    if weight.shape != part_of_block.shape or (weight < 0).any():
        raise ValueError("one non-negative public weight per block")
    order = np.lexsort((np.arange(len(part_of_block)), part_of_block))
    sorted_parts = part_of_block[order]
    cumulative = np.cumsum(weight[order])
    parts = np.asarray(parts, dtype=np.int64)
    start = np.searchsorted(sorted_parts, parts, side="left")
    end = np.searchsorted(sorted_parts, parts, side="right")
    if (end == start).any():
        raise ValueError("a part without blocks")
    before = np.where(start > 0, cumulative[np.maximum(start - 1, 0)], 0.0)
    mass = cumulative[end - 1] - before
    if (mass <= 0).any():
        raise ValueError("a part whose blocks all have zero weight")
    target = before + rng.random(len(parts)) * mass
    position = np.clip(np.searchsorted(cumulative, target, side="right"), start, end - 1)
    return order[position]
