"""What one check searches after one person's long history of fine releases (``release_audit``: the
split and the column certificates, then the search of the blocks of V the check changes), counted
in the search's own work units (nodes plus the sum of d^2 x support over nodes), not in seconds.

The long history: 16 random unions of blocks of 3 records (100 blocks), so every block is an atom
of fewer than t records and V (the released combinations that vanish on every large atom) has 16
dimensions over the 100 blocks. Another person's count that cuts across 60 of the blocks adds a
dimension to V; the split certificate shows that no small group follows, so nothing is searched
(without the certificates the changed block, 17 dimensions over the 100 blocks, is searched: 9.6 x
10^4 units). A union of blocks splits nothing and adds a dimension that neither certificate
places (V's rows are unions of blocks, so a group of columns leaves room): it is searched, to its
end. No cap refuses on the search's cost (a cap would refuse on how V is structured, a figure of
the records; ``test_simulatable_refusals`` shows it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from petlab.server.controller.release_audit import Functional, ReleaseAudit

PRIMES = (2_147_483_647, 2_147_483_629)
N, BLOCKS, SIZE = 600, 100, 3  # records; the long history's blocks of SIZE records come first
RELEASES = 16  # unions of blocks: V's dimension (the search's cost grows fast with it on such rows)


def blocks_mask(chosen: np.ndarray) -> np.ndarray:
    mask = np.zeros(N, dtype=bool)
    for block in chosen:
        mask[block * SIZE : block * SIZE + SIZE] = True
    return mask


def long_history(seed: int = 5) -> tuple[ReleaseAudit, np.random.Generator]:
    rng = np.random.default_rng(seed)
    audit = ReleaseAudit(pd.DataFrame({"x": np.arange(N)}), 10, primes=PRIMES)
    for _ in range(RELEASES):
        functional = [Functional.of(blocks_mask(rng.choice(BLOCKS, BLOCKS // 2, replace=False)))]
        assert audit.check(functional) is None
        audit.record(functional)
    return audit, rng


def v_dimension(audit: ReleaseAudit) -> int:
    return len(audit._bases[PRIMES[0]].vanishing_on_large())


def test_a_count_across_the_history_is_certified_without_a_search():
    audit, rng = long_history()
    assert v_dimension(audit) == RELEASES and audit.n_atoms == BLOCKS + 1
    across = np.zeros(N, dtype=bool)
    across[rng.choice(BLOCKS, 60, replace=False) * SIZE] = True  # one record of each of 60 blocks
    assert audit.check([Functional.of(across)]) is None
    assert audit.certificate == "splits" and audit.search_work == 0
    audit.record([Functional.of(across)])
    assert v_dimension(audit) == RELEASES + 1  # V grew: without the certificate its block is searched
    elsewhere = np.zeros(N, dtype=bool)
    elsewhere[BLOCKS * SIZE : BLOCKS * SIZE + 150] = True  # splits the large atom into large ones
    assert audit.check([Functional.of(elsewhere)]) is None and audit.search_work == 0


def test_a_release_that_splits_nothing_is_searched_to_its_end():
    audit, rng = long_history()
    union = [Functional.of(blocks_mask(rng.choice(BLOCKS, BLOCKS // 2, replace=False)))]
    assert audit.check(union) is None
    assert not audit.certificate and audit.search_work > 0
