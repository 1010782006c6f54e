"""Query-set-size control against every set released before (Domingo-Ferrer, PSD 2022, Section 4.1;
Denning and Schlörer's trackers): trackers and swaps.

Every analysis isolates query sets: the records its ``where`` selects and, for tables, each cell's
records. A set S is refused when it, or what it leaves out of the data, is small:
0 < |S| < t or 0 < N - |S| < t. Every new set S is compared with every set E released before (to
anyone: ``release_history``); with a = |S \\ E| and b = |E \\ S|, S is refused when both are below
t and not both zero (0 < max(a, b) < t):

* a tracker (b = 0, 0 < a < t, or the reverse): S and E differ by a small group whose count and
  sums follow exactly (count(A) - count(A and not B) = count(A and B));
* a swap (both 1 to t - 1): the sums of S and E differ by the difference of two small groups'
  values, an exact relation between a few records that the exact audit, which looks for groups
  (0/1 combinations), does not see.

A one-sided difference (a small, b at least t, or the reverse) is released: sum(S) - sum(E) is the
difference of a small group's sum and a large group's, which gives no exact value (9 records on one
side against 1,798 on the other); when several releases do pin the small group, the exact audit
(``release_audit``) refuses. Refusing one-sided differences would make the refusal depend on one
record that no released answer shows: on two data sets that agree on every earlier answer and
differ in one record's hours, a = 9 on one and 10 on the other, and the position of the refusal
spells out the hours (``tests/server/controller/test_simulatable_refusals.py``).

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
            larger = np.maximum(only_new, only_old)
            close = np.flatnonzero((larger > 0) & (larger < t))
            if len(close):
                a, b = int(only_new[close[0]]), int(only_old[close[0]])
                kind = "a swap" if a and b else "a tracker"
                return (
                    f"a query set differs from an earlier one by {a} and {b} record(s), both fewer "
                    f"than {t}: {kind}"
                )
        return None

    def record(self, masks: list[np.ndarray]) -> None:
        self.history = list(self.history) + [np.packbits(np.asarray(m, dtype=bool)) for m in masks]
