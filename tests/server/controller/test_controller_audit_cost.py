"""The audit's cost stays bounded when one person releases many fine-grained analyses, through the
gRPC API on the shipped 5,000-record sample.

The attack: one person releases a hundred distinct counts over age ranges (each splits the records
no finer than the age codes, so their rank is at most the codes') and repeats a table. If every
repeat added its rows to the history, and every later decision rebuilt the audit from all released
rows (a left null space of an m x m matrix), the next person would wait on work that grows with the
rows squared. A repeat adds nothing, and the audit keeps a reduced basis (rank x atoms,
``reduced_basis``) that a new analysis's own rows are reduced against: another person's count
reads only its own rows, whatever the history holds.
"""

from __future__ import annotations

import time

import pandas as pd
import pytest
from controller_calls import outcomes

from petlab.client.knn_client import make_channel
from petlab.plaindata import acs_sample_path
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.release_audit import ReleaseAudit
from petlab.server.controller.release_history import ReleaseHistory

DATA = pd.read_csv(acs_sample_path())
DOMAIN = PublicDomain.shipped_for(DATA)


@pytest.fixture()
def server(serve, tmp_path):
    with serve(tmp_path, analysis_data=acs_sample_path(), open_analysis=True) as running:  # default limits
        yield running


def age_ranges() -> list[dict]:
    """Distinct counts over ranges of age codes inside [2, 50], where every code holds 36 or more
    records (so no two sets differ by fewer than t records): hundreds of released rows, of rank at
    most the number of codes."""
    return [
        {"type": "count", "where": {"age": {"between": [low, high]}}}
        for low in range(2, 27, 2)
        for high in range(low + 10, 51, 3)
    ]


def test_many_fine_grained_releases_leave_the_next_audit_bounded(server, monkeypatch):
    server.controller._history = ReleaseHistory(DATA, domain=DOMAIN)
    history = server.controller.history
    table = {"type": "frequency", "rows": "sex", "columns": "incc"}
    specs = [table] * 20 + age_ranges()
    with make_channel(f"127.0.0.1:{server.port}") as channel:
        results = outcomes(channel, specs)
        assert None not in results, (results.index(None), specs[results.index(None)], len(results))
        audit = history.audit
        assert audit is not None
        rows = audit.n_released
        stored = server.controller._sessions._db.execute("SELECT COUNT(*) FROM releases").fetchone()[0]
        assert rows == len(age_ranges()) + 4 and stored == rows  # the table's 19 repeats added nothing
        # memory: the kept basis is rank x atoms, and the rank is bounded by the atoms, not the rows
        ages = DATA.age[DATA.age.between(2, 50)].nunique() + 1  # and everyone outside [2, 50]
        assert audit.rank() <= ages + 3 < rows  # functions of the age code, plus the table's 4 cells
        assert audit.basis_entries() == len(audit.primes) * audit.rank() * audit.n_atoms

        # another person's count splits every atom into small pieces, so its audit runs; it
        # reads only its own row: count the released rows each product over the atoms is given
        read: list[int] = []
        over_atoms = ReleaseAudit._over_atoms

        def counted(self, bits, weights, records, p):
            read.append(len(weights))
            return over_atoms(self, bits, weights, records, p)

        monkeypatch.setattr(ReleaseAudit, "_over_atoms", counted)
        common = int(DATA.occ.value_counts().index[0])  # 737 records: a few in each atom
        where = {"occ": {"in": [common]}}
        started = time.monotonic()
        (answer,) = outcomes(channel, [{"type": "count", "where": where}])
        elapsed = time.monotonic() - started
    assert answer is not None and answer["count"] == int(DATA.occ.eq(common).sum())
    assert read and max(read) <= 1, f"the audit read {max(read)} released rows for one new count"
    assert elapsed < 30.0  # generous: the point is the rows read above, not the shared machine's clock
