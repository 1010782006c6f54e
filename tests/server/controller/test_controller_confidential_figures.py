"""What the analysis controller says outside its confidential diagnostics file names no figure of
the confidential records (GUIDE: a figure computed from the data is itself a release).

Each test starts ``petlab-server``'s controller on the shipped 5,000-record ACS sample, captures
every log record and every answer an analyst gets, and checks that the figure is absent there
(and, where the owner needs it, present in ``controller-diagnostics.log`` only).
"""

from __future__ import annotations

import hashlib
import io
import logging

import numpy as np
import pandas as pd
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from petlab.client.analyst import describe, prepare, run
from petlab.client.knn_client import make_channel
from petlab.plaindata import acs_sample_path
from petlab.plaindata.plausible.tabular_schema import acs_domains_path

DATA = pd.read_csv(acs_sample_path())
DOMAIN = acs_domains_path().read_text()
CONFIDENTIAL_LOGGER = "petlab.server.controller.diagnostics"


def ordinary_log(caplog) -> str:
    """Everything logged, except the confidential diagnostics logger's records."""
    return "\n".join(r.getMessage() for r in caplog.records if r.name != CONFIDENTIAL_LOGGER)


def answers(channel, specs: list[dict]) -> str:
    out = io.StringIO()
    run(prepare(specs, Ed25519PrivateKey.generate()), channel, out=out)
    return out.getvalue()


def test_the_ordinary_log_names_neither_the_record_count_nor_the_data_digest(serve, tmp_path, caplog):
    """The server logged "controller data: 5000 records": an analyst who reads the log knows N
    without any release, and the audit never saw it (count(all) - count(S minus one record) is
    then a differencing pair of which only one half was audited). It also logged the data file's
    SHA-256, a function of the records alone (see the next test)."""
    raw_digest = hashlib.sha256(acs_sample_path().read_bytes()).hexdigest()
    settings = {"analysis_data": acs_sample_path(), "open_analysis": True, "analysis_cooldown_seconds": 0}
    with caplog.at_level(logging.INFO):
        with serve(tmp_path, **settings) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
            answers(channel, [{"type": "mean", "column": "hpw", "where": {"age": {"between": [30, 39]}}}])
            describe(channel)
        with serve(tmp_path, **settings):  # the restart logs the history it replays
            pass
    text = ordinary_log(caplog)
    assert "functionals released before" in text  # the log was captured
    assert str(len(DATA)) not in text and f"{len(DATA):,}" not in text
    assert raw_digest not in text


def test_describe_does_not_let_an_analyst_confirm_a_guessed_record(serve, tmp_path):
    """Describe published SHA-256 of the data file. An analyst who knows every record but one (the
    neighbour of differential privacy's threat model) hashes the file with each candidate value of
    the missing one and finds it: one record's hours read off Describe with no analysis run. The
    digest is keyed with a secret kept owner-only in the data directory: stable across
    restarts (a co-signature stays valid), different for a changed file, and no guess matches."""
    lines = acs_sample_path().read_bytes().split(b"\n")
    header = lines[0].split(b",")
    hpw = header.index(b"hpw")
    target = 1  # the first record's line
    fields = lines[target].split(b",")

    def file_with(hours: int) -> bytes:
        guess = list(fields)
        guess[hpw] = str(hours).encode()
        return b"\n".join([*lines[:target], b",".join(guess), *lines[target + 1 :]])

    settings = {"analysis_data": acs_sample_path(), "open_analysis": True}
    with serve(tmp_path, **settings) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        published = describe(channel)["dataset_sha256"]
    candidates = range(0, 100)
    matches = [h for h in candidates if hashlib.sha256(file_with(h)).hexdigest() == published]
    assert file_with(int(fields[hpw])) == acs_sample_path().read_bytes()  # the guess is well formed
    assert matches == []  # with the plain SHA-256: [40], the record's hours
    with serve(tmp_path, **settings) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        assert describe(channel)["dataset_sha256"] == published  # stable for the same data directory
    changed = tmp_path / "changed.csv"
    changed.write_bytes(file_with(int(fields[hpw]) + 1))
    with (
        serve(tmp_path, **{**settings, "analysis_data": changed}) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        assert describe(channel)["dataset_sha256"] != published  # a co-signature binds the data
    key = tmp_path / "dataset-digest-key"
    assert key.stat().st_mode & 0o777 == 0o600


def test_a_history_that_already_discloses_is_told_in_the_confidential_file_only(serve, tmp_path, caplog):
    """After a change of rules, the server checks whether the history already determines a group
    below the new threshold: a bit computed from the records (how many fall in the released
    sets). It goes to the confidential diagnostics, never to the ordinary log."""
    youngest = int((DATA.age == DATA.age.min()).sum())
    assert 10 <= youngest < 50  # released under acro's threshold 10, below a threshold of 50
    settings = {"analysis_data": acs_sample_path(), "open_analysis": True, "analysis_cooldown_seconds": 0}
    with serve(tmp_path, **settings) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        released = answers(channel, [{"type": "count", "where": {"age": {"eq": int(DATA.age.min())}}}])
        assert f'"count": {youngest}' in released
    rules = tmp_path / "rules.toml"
    rules.write_text("[rules]\nthreshold = 50\n")
    with caplog.at_level(logging.INFO), serve(tmp_path, **settings, rules=rules):
        pass
    assert "group below the threshold" not in ordinary_log(caplog)
    assert "group below the threshold" in (tmp_path / "controller-diagnostics.log").read_text()


@pytest.mark.parametrize("column", ["hpw", "age"])
def test_a_numerical_failure_on_the_records_is_a_counted_refusal_that_names_nothing(
    serve, tmp_path, caplog, column
):
    """Attack: a regression whose predictor holds an infinite value makes numpy raise LinAlgError
    ("SVD did not converge"), a ValueError; were numpy's message shown and the refusal not counted,
    free probes would locate the record (the failure happens exactly when the set contains it). It
    is the generic abort, counted against the person, its message in the confidential file."""
    data = DATA.astype({"hpw": float}).copy()
    data.loc[7, "hpw"] = np.inf
    path = tmp_path / "with-inf.csv"
    data.to_csv(path, index=False)
    domain = tmp_path / "domain.csv"  # the public domain must cover the data: hours may be infinite
    domain.write_text(
        "\n".join(line + (",inf" if line.startswith("hpw,") else "") for line in DOMAIN.splitlines())
    )
    settings = {
        "analysis_data": path,
        "analysis_domain": domain,
        "open_analysis": True,
        "analysis_cooldown_seconds": 0,
    }
    spec = {"type": "regression", "outcome": "incc", "predictors": ["hpw"]}
    if column == "age":  # the set holds the record: the same failure through a where clause
        spec["where"] = {"age": {"eq": int(data.age[7])}}
    with (
        caplog.at_level(logging.INFO),
        serve(tmp_path, **settings) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        said = answers(channel, [spec])
        persons = running.controller._sessions.persons()
    assert "SVD" not in said and "converge" not in said
    assert "the analysis failed" in said
    assert [state.refusals for state, _ in persons] == [1]  # counted: one bit, under the budget
    assert "SVD" not in ordinary_log(caplog)
    assert "SVD" in (tmp_path / "controller-diagnostics.log").read_text()
