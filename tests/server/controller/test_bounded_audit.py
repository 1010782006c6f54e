"""The audit's cost per check is that of what the check changes, and capped (``release_audit``:
the incremental small-group search and ``search_work_cap``), counted in the search's own work
units (nodes plus the sum of d^2 x support over nodes), not in seconds.

One person's long history of fine releases makes V (the released combinations that vanish on every
large atom) large: here 30 random halves of 200 records, every record its own small atom. Before
the incremental search, every later check searched all of V again, whoever sent it; now a count
that adds no dimension to V searches nothing, one that changes V searches the blocks it changes,
at most ``search_work_cap`` per prime, and one whose blocks would cost more is refused at once.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from petlab.server.controller.release_audit import Functional, ReleaseAudit

PRIMES = (2_147_483_647, 2_147_483_629)
N, FINE = 600, 200  # records; the first FINE are the long history's


def long_history(seed: int = 5) -> tuple[ReleaseAudit, np.random.Generator]:
    rng = np.random.default_rng(seed)
    audit = ReleaseAudit(pd.DataFrame({"x": np.arange(N)}), 10, primes=PRIMES)
    for _ in range(30):
        mask = np.zeros(N, dtype=bool)
        mask[rng.choice(FINE, FINE // 2, replace=False)] = True
        functional = [Functional.of(mask)]
        assert audit.check(functional) is None
        audit.record(functional)
    return audit, rng


def v_cost(audit: ReleaseAudit) -> float:
    vanishing = audit._bases[PRIMES[0]].vanishing_on_large()
    return float(len(vanishing)) ** 2 * int(vanishing.any(axis=0).sum())


def test_a_check_searches_what_it_changes_at_most_its_cap():
    audit, rng = long_history()
    assert v_cost(audit) >= 30**2 * 150  # V: 30 dimensions over the fine records' atoms
    elsewhere = np.zeros(N, dtype=bool)
    elsewhere[FINE : FINE + 100] = True  # another person's count: 100 records outside the history
    assert audit.check([Functional.of(elsewhere)]) is None
    assert audit.search_work == 0  # before: the whole of V searched again (30^2 x 200 per node)
    audit.record([Functional.of(elsewhere)])
    assert audit.check([Functional.of(~elsewhere)]) is None and audit.search_work == 0  # in the span
    mask = np.zeros(N, dtype=bool)
    mask[rng.choice(FINE, FINE // 2, replace=False)] = True  # one more fine release: V grows
    assert audit.check([Functional.of(mask)]) is None
    assert 0 < audit.search_work <= len(PRIMES) * audit.search_work_cap
    audit.search_work_cap = v_cost(audit) / 2  # V's block now costs more than the cap
    finding = audit.check([Functional.of(mask)])
    assert finding is not None and "cap" in finding.reason and finding.group_size == 0
    assert audit.search_work == 0  # refused before any search: no slowdown for anyone
    inside = np.zeros(N, dtype=bool)
    inside[FINE + 100 : FINE + 250] = True  # splits a large atom into large ones: V unchanged
    assert audit.check([Functional.of(inside)]) is None and audit.search_work == 0
