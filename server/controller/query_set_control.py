"""Query-set-size control across an analyst's whole sequence (Domingo-Ferrer, PSD 2022, Section 4.1;
Denning & Schlörer's trackers).

Every analysis isolates query sets: the records its ``where`` selects and, for tables, each cell's
records. A set S is refused when it, or what it leaves out of the data, is small:
0 < |S| < t or 0 < N - |S| < t. Against trackers (a small set recovered as the difference of two
large ones, e.g. count(A) - count(A and not B) = count(A and B)), every new set S is compared with
every set E released before: both |S \\ E| and |E \\ S| must be 0 or at least t. Sets are kept as
packed bit masks, so the history of a long sequence over 100,000 records stays small.

Pairwise comparison misses trackers built from more than two sets: with A, B, "neither A nor B"
and "all", each large and pairwise far apart, count(A) + count(B) + count(neither) - count(all)
= count(A and B), and the same combination of sums or means gives the values of a single record
in A and B. :meth:`QuerySetControl.isolated_record` audits the whole released history exactly: a
record j is exposed by counts, sums and means over sets S_1..S_m exactly when its indicator e_j is
a linear combination of their indicators (Chin and Ozsoyoglu's audit for SUM queries). With U an
orthonormal basis of the span of the indicator vectors (an SVD of the m x N 0/1 matrix), e_j lies
in the span iff ||U^T e_j||^2 = sum_r U_rj^2 = 1, so the audit of all N records at once costs one
SVD, O(min(m, N)^2 max(m, N)). Past ``max_audit_sets`` released sets the audit is not run and
further analyses are refused (a sequence that long is better served by noise; README).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def popcount(packed: np.ndarray) -> int:
    return int(_POPCOUNT[packed].sum())


@dataclass
class QuerySetControl:
    n_records: int
    threshold: int = 10
    history: list[np.ndarray] = field(default_factory=list)  # packed masks released so far
    max_audit_sets: int = 2000

    def violation(self, masks: list[np.ndarray]) -> str | None:
        """Why these query sets may not be released together, or None."""
        packed_new = [np.packbits(np.asarray(m, dtype=bool)) for m in masks]
        t = self.threshold
        for index, packed in enumerate(packed_new):
            size = popcount(packed)
            if 0 < size < t:
                return f"a query set holds {size} record(s), fewer than {t}"
            if 0 < self.n_records - size < t:
                return f"a query set leaves out only {self.n_records - size} record(s), fewer than {t}"
            for earlier in self.history + packed_new[:index]:
                only_new, only_old = popcount(packed & ~earlier), popcount(earlier & ~packed)
                for difference in (only_new, only_old):
                    if 0 < difference < t:
                        return (
                            f"a query set differs from an earlier one by {difference} record(s), "
                            f"fewer than {t}: a tracker could isolate them"
                        )
        return None

    def isolated_record(self, masks: list[np.ndarray]) -> str | None:
        """Why releasing these sets after the history would let a single record be solved for
        exactly (module docstring), or None."""
        packed = self.history + [np.packbits(np.asarray(m, dtype=bool)) for m in masks]
        if len(packed) > self.max_audit_sets:
            return f"the sequence has released more than {self.max_audit_sets} query sets"
        rows = np.unpackbits(np.stack(packed), axis=1, count=self.n_records).astype(np.float64)
        rows = rows[rows.any(axis=1)]
        if not len(rows):
            return None
        _, singular, vt = np.linalg.svd(rows, full_matrices=False)
        basis = vt[singular > singular.max() * max(rows.shape) * np.finfo(float).eps]
        exposure = (basis**2).sum(axis=0)
        exposed = int((exposure > 1 - 1e-6).sum())
        if exposed:
            return f"{exposed} record(s) would be a linear combination of the released query sets"
        return None

    def record(self, masks: list[np.ndarray]) -> None:
        self.history += [np.packbits(np.asarray(m, dtype=bool)) for m in masks]
