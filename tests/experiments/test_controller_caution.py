"""The controller's caution on two benign workloads, measured and kept current.

The committed table (``results/controller_caution.csv``, included by the controller-audit page) must
be what the code decides today, analysis by analysis, reason by reason; the controller never
releases what acro's own rules refuse, and releases at least 90 % of what they release on each
workload. With the history's checks switched off (``ReleaseHistory.refusal`` returning output
checking's reason only) the two exact-audit refusals turn released and this test fails; with the
pairwise rule on one-sided differences the shares fall to 16 of 23 and 21 of 32 (70 %, 66 %)."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from petlab.experiments import controller_caution
from petlab.plaindata import acs_sample_path
from petlab.server.controller.public_domain import PublicDomain

COMMITTED = Path(__file__).resolve().parents[2] / "results" / "controller_caution.csv"


@pytest.fixture(scope="module")
def sample() -> tuple[pd.DataFrame, PublicDomain]:
    data = pd.read_csv(acs_sample_path())
    domain = PublicDomain.shipped_for(data)
    assert domain is not None
    return data, domain


def test_the_committed_caution_table_is_what_the_controller_decides(sample):
    rows, kinds = controller_caution.measure(*sample)
    with COMMITTED.open(newline="") as handle:
        committed = list(csv.DictReader(handle))
    assert rows == committed
    assert sum(kinds.values()) == sum(row["controller"] != "released" for row in rows)
    for row in rows:  # acro's rules are part of the controller's decision
        if row["acro"] == "refused":
            assert row["controller"] != "released", row
    for name, analyses, acro, ours, _ in controller_caution.summary(rows):
        assert analyses >= 26 and ours >= 0.9 * acro, name
    assert sum(row["workload"] == "papers" for row in rows) >= 30
