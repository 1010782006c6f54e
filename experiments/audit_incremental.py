"""The incremental release audit: time and peak memory of one audit against 1,000 to 100,000
released rows, with atoms from a few hundred up to the sample's full domain (every distinct
record), and a restart's replay time.

Workloads (the columns the released boxes constrain, so how finely the atoms can split): age and
sex (at most 138 atoms); age, sex, income class, race and marital status (at most 1,322, the
distinct records over those columns); all eleven columns (the full domain: at most 4,961, the
sample's distinct records). A released row is a random box of the public domain
(``public_domain``: an interval of an ordered column, a random half of a categorical column's
values, on one to five of the workload's columns), one in five weighed by hours worked (a sum), as
``analyses`` releases them. Rows are drawn until the history holds the target number of distinct
rows (duplicates are not stored: ``release_history``); a workload with fewer distinct boxes than a
target skips it.

Measured per (workload, rows): the restart's replay (``ReleaseAudit.record`` of every row over the
final atoms: the incremental path), the rank and the kept basis's size, then one audit of one more
random count (``ReleaseAudit.check``) with its ``tracemalloc`` peak (numpy's arrays are traced).
The batch audit it is tested against (``tests/server/controller/audit_spaces.batch_check``, the
left null space of all released rows: an m x m matrix) is a test's reference, not measured here.
A workload stops at the first size whose replay exceeds ``time_limit`` seconds. No checks run
while the history is built: the rows are replayed unchecked, as a server replays its stored
history, so these histories are larger than the controller would have released.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pandas as pd

from petlab.server.controller.release_audit import Finding, Functional, ReleaseAudit

WORKLOADS = {
    "age, sex": ["age", "sex"],
    "age, sex, incc, race, ms": ["age", "sex", "incc", "race", "ms"],
    "all 11 columns (full domain)": None,
}
ORDERED = ("age", "hpw")
MISSES = 20_000
BOX_COLUMNS = 5  # at most 3 gave only 33,834 distinct boxes over the 5 columns in 120,000 draws


_COLUMNS: dict[tuple[int, str], tuple[pd.DataFrame, np.ndarray, np.ndarray]] = {}


def _column(data: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """A column's sorted distinct values and each record's index among them (kept: a bench draws
    100,000 boxes)."""
    key = (id(data), column)
    if key not in _COLUMNS or _COLUMNS[key][0] is not data:
        levels, codes = np.unique(data[column].to_numpy(), return_inverse=True)
        _COLUMNS[key] = (data, levels, codes.ravel())
    return _COLUMNS[key][1:]


def random_box(rng: np.random.Generator, data: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """A random box of the domain over one to ``BOX_COLUMNS`` of ``columns``: its members."""
    mask = np.ones(len(data), dtype=bool)
    shape = int(rng.integers(1, min(BOX_COLUMNS, len(columns)) + 1))
    for column in rng.choice(columns, size=shape, replace=False):
        levels, codes = _column(data, column)
        if column in ORDERED:
            low = int(rng.integers(0, len(levels)))
            high = int(rng.integers(low, len(levels)))
            mask &= (codes >= low) & (codes <= high)
        else:
            chosen = np.zeros(len(levels), dtype=bool)
            chosen[rng.choice(len(levels), size=max(1, len(levels) // 2), replace=False)] = True
            mask &= chosen[codes]
    return mask


def random_rows(
    rng: np.random.Generator, data: pd.DataFrame, columns: list[str], count: int
) -> list[Functional]:
    """Up to ``count`` distinct random rows; fewer when the workload's columns have fewer distinct
    boxes (drawing stops after 3 ``count`` + ``MISSES`` draws: over the full domain 120,000 draws
    gave 89,551 distinct rows)."""
    seen: set[tuple[bytes, str | None]] = set()
    out: list[Functional] = []
    draws = 0
    while len(out) < count and draws < 3 * count + MISSES:
        draws += 1
        functional = Functional.of(random_box(rng, data, columns), "hpw" if rng.random() < 0.2 else None)
        key = (functional.members.tobytes(), functional.weight)
        if key not in seen:
            seen.add(key)
            out.append(functional)
    return out


def timed(call) -> tuple[Finding | None, float, float]:
    """``call()``'s result, seconds and tracemalloc peak in MB."""
    tracemalloc.start()
    start = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return result, seconds, peak


def outcome(finding: Finding | None) -> str:
    if finding is None:
        return "nothing determined"
    return f"a group of {finding.group_size} determined"


def bench_incremental(
    data: pd.DataFrame, label: str, sizes: tuple[int, ...], seed: int, time_limit: float
) -> list[dict]:
    rows_out = []
    for workload, chosen in WORKLOADS.items():
        columns = list(data.columns) if chosen is None else chosen
        rng = np.random.default_rng(seed)
        released = random_rows(rng, data, columns, max(sizes))
        primes = ReleaseAudit(data).primes  # one pair for the workload: the same audits compared
        for size in sorted(sizes):
            if size > len(released):
                print(
                    f"{label} [{workload}]: only {len(released)} distinct rows drawn "
                    f"(the boxes run out); {size} skipped"
                )
                continue
            audit = ReleaseAudit(data, primes=primes)
            rows = released[:size]
            _, replay, replay_peak = timed(lambda audit=audit, rows=rows: audit.record(rows))
            candidate = [Functional.of(random_box(rng, data, columns))]
            incremental, seconds, peak = timed(lambda audit=audit, c=candidate: audit.check(c))
            row = {
                "data": label,
                "workload": workload,
                "released_rows": size,
                "atoms": audit.n_atoms,
                "rank": audit.rank(),
                "basis_mb": round(audit.basis_entries() * 8 / 2**20, 1),
                "restart_replay_s": round(replay, 2),
                "replay_peak_mb": round(replay_peak, 1),
                "audit_s": round(seconds, 3),
                "audit_peak_mb": round(peak, 1),
                "outcome": outcome(incremental),
            }
            print(
                f"{label} [{workload}]: {size:>6} rows, {row['atoms']:>5} atoms, rank {row['rank']:>5}, "
                f"basis {row['basis_mb']} MB; replay {replay:.1f} s, peak {replay_peak:.0f} MB; "
                f"audit {seconds:.3f} s, peak {peak:.1f} MB ({row['outcome']})",
                flush=True,
            )
            rows_out.append(row)
            if replay > time_limit:
                break
    return rows_out
