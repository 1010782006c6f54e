"""Query-set-size control across an analyst's whole sequence (Domingo-Ferrer, PSD 2022, Section 4.1;
Denning & Schlörer's trackers).

Every analysis isolates query sets: the records its ``where`` selects and, for tables, each cell's
records. A set S is refused when it, or what it leaves out of the data, is small:
0 < |S| < t or 0 < N - |S| < t. Against trackers (a small set recovered as the difference of two
large ones, e.g. count(A) - count(A and not B) = count(A and B)), every new set S is compared with
every set E released before: both |S \\ E| and |E \\ S| must be 0 or at least t. Sets are kept as
packed bit masks, so the history of a long sequence over 100,000 records stays small.
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

    def record(self, masks: list[np.ndarray]) -> None:
        self.history += [np.packbits(np.asarray(m, dtype=bool)) for m in masks]
