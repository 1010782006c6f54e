"""Query-set-size control against every set released before (Domingo-Ferrer, PSD 2022, Section 4.1;
Denning and Schlörer's trackers): the pairwise rule.

Every analysis isolates query sets: the records its ``where`` selects and, for tables, each cell's
records. A set S is refused when it, or what it leaves out of the data, is small:
0 < |S| < t or 0 < N - |S| < t. Against trackers (a small set recovered as the difference of two
large ones, e.g. count(A) - count(A and not B) = count(A and B)), every new set S is compared with
every set E released before (to anyone: ``release_history``): both |S \\ E| and |E \\ S| must be 0
or at least t. This also refuses a pair of sets that swap a few records (|S \\ E| and |E \\ S|
small, neither zero), which the exact audit alone would let through: their sums differ by the
difference of two small groups' values.

Sets are packed bit masks. The sizes |S and E| for all pairs come from one matrix product of the
unpacked bits in blocks of records (float32 sums of 0/1 stay exact below 2^24 records), so the
rule costs one pass over the released bits per analysis.

Pairwise comparison misses trackers built from more than two sets (A, B, "neither", "all" give
the one record in A and B by inclusion-exclusion); the exact audit of all released functionals
(``release_audit``) catches those.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)
BLOCK_BYTES = 1024  # records per block / 8


def popcount(packed: np.ndarray) -> int:
    return int(_POPCOUNT[packed].sum())


def intersections(history: np.ndarray, new: np.ndarray, n_records: int) -> np.ndarray:
    """|E_i and S_j| for every row E_i of ``history`` and S_j of ``new`` (packed bits)."""
    if n_records >= 1 << 24:
        raise ValueError("float32 counts are exact below 2^24 records only")
    out = np.zeros((len(history), len(new)), dtype=np.float32)
    for start in range(0, history.shape[1], BLOCK_BYTES):
        left = np.unpackbits(history[:, start : start + BLOCK_BYTES], axis=1).astype(np.float32)
        right = np.unpackbits(new[:, start : start + BLOCK_BYTES], axis=1).astype(np.float32)
        out += left @ right.T
    return out.astype(np.int64)


@dataclass
class QuerySetControl:
    n_records: int
    threshold: int = 10
    history: list[np.ndarray] | np.ndarray = field(default_factory=list)  # packed masks released

    def violation(self, masks: list[np.ndarray]) -> str | None:
        """Why these query sets may not be released together, or None."""
        if not len(masks):
            return None
        return self.violation_packed(np.stack([np.packbits(np.asarray(m, dtype=bool)) for m in masks]))

    def violation_packed(self, new: np.ndarray) -> str | None:
        """:meth:`violation` for query sets given as packed bits (one row each)."""
        if not len(new):
            return None
        t, n = self.threshold, self.n_records
        new_sizes = _POPCOUNT[new].sum(axis=1)
        for size in new_sizes:
            if 0 < size < t:
                return f"a query set holds {size} record(s), fewer than {t}"
            if 0 < n - size < t:
                return f"a query set leaves out only {n - size} record(s), fewer than {t}"
        history = np.asarray(self.history, dtype=np.uint8).reshape(-1, new.shape[1])
        earlier = np.concatenate([history, new])
        shared = intersections(earlier, new, n)
        earlier_sizes = np.concatenate([_POPCOUNT[history].sum(axis=1), new_sizes])
        for j in range(len(new)):
            upto = len(history) + j  # the history and the sets before this one in the analysis
            only_new = new_sizes[j] - shared[:upto, j]
            only_old = earlier_sizes[:upto] - shared[:upto, j]
            differences = np.concatenate([only_new, only_old])
            small = differences[(differences > 0) & (differences < t)]
            if len(small):
                return (
                    f"a query set differs from an earlier one by {int(small[0])} record(s), "
                    f"fewer than {t}: a tracker could isolate them"
                )
        return None

    def record(self, masks: list[np.ndarray]) -> None:
        self.history = list(self.history) + [np.packbits(np.asarray(m, dtype=bool)) for m in masks]
