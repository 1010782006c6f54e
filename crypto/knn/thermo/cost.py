"""Cost model of the thermometer family: programmable bootstraps (PBS) per query from public facts.

Every PBS of the circuit is counted here without compiling (``tests/crypto/knn/test_thermo_knn.py`` checks
the count against concrete's ``programmable_bootstrap_count``):

- reduction (``spec.reduced``): ``shift`` truncation PBS and one lookup per point;
- the per-class network: its comparators (:func:`crypto.knn.thermo.network.whole_program`,
  about 2 per point for k = 3);
- indicators: one per counted non-filler entry of the C class lists (``sum_c min(k, n_c)``, less
  one per class when C <= k: ``plan.counted_positions``);
- the winner: ``C (C - 1) / 2`` signs, then nothing (C = 2), one packed lookup (C = 3) or C.

``pbs_per_point`` is the slope that matters at scale; :func:`extrapolate` gives the count for any
n with classes in the same proportions (e.g. 10^5 training points).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from petlab.crypto.knn.thermo.network import whole_program
from petlab.crypto.knn.thermo.plan import DistanceSpec, counted_positions


@dataclass(frozen=True)
class LookupCount:
    reduction: int
    truncation: int
    comparators: int
    indicators: int
    vote: int

    @property
    def total(self) -> int:
        return self.reduction + self.truncation + self.comparators + self.indicators + self.vote

    @property
    def per_point_parts(self) -> int:
        """The PBS that grow with n (everything but the indicators and the vote)."""
        return self.reduction + self.truncation + self.comparators


def vote_lookups(n_classes: int) -> int:
    pairs = n_classes * (n_classes - 1) // 2
    if n_classes == 2:
        return pairs
    if n_classes == 3:
        return pairs + 1
    return pairs + n_classes


def count(class_sizes: Sequence[int], k: int, spec: DistanceSpec) -> LookupCount:
    """PBS of one query for training classes of these sizes (public: n per class, k, the spec)."""
    sizes = [int(s) for s in class_sizes]
    n = sum(sizes)
    labels = np.repeat(np.arange(len(sizes)), sizes)
    program = whole_program(labels, len(sizes), k)
    return LookupCount(
        reduction=n if spec.reduced else 0,
        truncation=n * spec.shift if spec.reduced else 0,
        comparators=program.comparators,
        indicators=sum(1 for s in sizes for j in counted_positions(len(sizes), k) if j < min(k, s)),
        vote=vote_lookups(len(sizes)),
    )


def extrapolate(class_sizes: Sequence[int], n: int, k: int, spec: DistanceSpec) -> LookupCount:
    """:func:`count` for ``n`` points with the classes in the proportions of ``class_sizes``."""
    shares = np.asarray(class_sizes, dtype=np.float64) / sum(class_sizes)
    sizes = np.floor(shares * n).astype(int)
    sizes[: n - sizes.sum()] += 1
    return count(sizes.tolist(), k, spec)
