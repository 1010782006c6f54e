"""The incremental release audit (kept bases, the split certificate, the search of the changed
blocks) against the batch audit that rebuilds everything from the released rows.

Random histories are released step by step, so atoms split and large atoms become small between
steps. After each step the incremental decision on the next forms must equal the batch audit's
(``audit_spaces.batch_check``), the kept basis
must span what the batch computes (V: the combinations of released rows that vanish on every large
atom), and a restart that replays the rows at once must keep the same state.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from audit_spaces import batch_check, batch_space, kept_space, random_forms
from hypothesis import given, settings
from hypothesis import strategies as st

from petlab.server.controller.modular import random_prime
from petlab.server.controller.release_audit import Functional, ReleaseAudit

P = random_prime(np.random.default_rng(30))


@settings(max_examples=25)
@given(st.integers(0, 2**32 - 1))
def test_the_incremental_audit_decides_as_the_batch_audit(seed):
    rng = np.random.default_rng(seed)
    n, t = int(rng.integers(12, 60)), int(rng.integers(2, 7))
    data = pd.DataFrame({"w": rng.integers(1, 4, size=n), "z": rng.integers(-2, 3, size=n) / 2})
    audit = ReleaseAudit(data, t, primes=(P,))
    released: list[Functional] = []
    for step in range(int(rng.integers(2, 7))):
        forms = random_forms(rng, data, int(rng.integers(1, 4)), coarse=step == 0 and rng.random() < 0.7)
        incremental, batch = audit.check(forms), batch_check(audit, forms, np.random.default_rng(seed))
        assert incremental == batch
        if incremental is None or rng.random() < 0.5:  # a refused step is sometimes recorded anyway
            audit.record(forms)
            released += forms
            assert np.array_equal(kept_space(audit, P), batch_space(audit, P))
    restarted = ReleaseAudit(data, t, primes=(P,))
    restarted.record(released)
    assert restarted.rank() == audit.rank()
    assert np.array_equal(kept_space(restarted, P), kept_space(audit, P))
    forms = random_forms(rng, data, 2)
    assert restarted.check(forms) == batch_check(audit, forms, np.random.default_rng(seed))
