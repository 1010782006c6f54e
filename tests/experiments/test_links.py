"""The emulated link against its profile (throughput each way, round trip, TCP's handshake) and the
latency model's arithmetic in ``petlab-experiments links``; no timing of the product itself."""

import math

import pandas as pd
import pytest

from petlab.experiments import link_figures
from petlab.experiments.link_model import (
    HANDSHAKE_ROUNDS,
    Call,
    crossover_rtt,
    model_seconds,
    query_model,
    rounds,
    run_model,
)
from petlab.experiments.link_relay import MBIT, LinkProfile, check_link
from petlab.experiments.links import COLUMNS, LOOPBACK, ClientRun, compute_terms, row, summarise

PROFILE = LinkProfile("test", up_mbit=8, down_mbit=16, rtt_ms=30)
CHECKED = LinkProfile("checked", up_mbit=16, down_mbit=32, rtt_ms=10)  # a cheap link to measure


def test_the_relay_gives_a_profile_its_throughput_and_round_trip():
    check = check_link(CHECKED, seconds=0.08, pings=5, transfers=3)
    # the delay is a floor by construction; a loaded machine can only add to it (the shortest of
    # the pings is the link's round trip)
    assert CHECKED.rtt_ms - 0.05 <= check.rtt_ms <= CHECKED.rtt_ms + 5
    assert check.up_mbit == pytest.approx(CHECKED.up_mbit, rel=0.2)
    assert check.down_mbit == pytest.approx(CHECKED.down_mbit, rel=0.2)
    # a new connection: the first reply no earlier than two round trips after the connect
    assert check.setup_ms >= 2 * CHECKED.rtt_ms - 0.05
    assert check.within(0.2, 5)
    assert not check.within(0.2, -1)  # the tolerance is applied, not ignored


FIRST = [
    Call("ListModels", 0.2, 0, 200),
    Call("GetClientSpecs", 0.1, 6, 3000),
    Call("RegisterKeys", 9.0, 40_000_000, 40),
    Call("Classify", 2.0, 1700, 12_500),
]
COMPUTE = {"ListModels": 0.001, "GetClientSpecs": 0.002, "RegisterKeys": 0.5, "Classify": 1.5}


def test_the_model_is_rounds_times_rtt_plus_bytes_over_bandwidth_plus_compute():
    assert rounds(FIRST) == 4 + HANDSHAKE_ROUNDS == 6
    assert rounds(FIRST, new_connection=False) == 4 and rounds([]) == 0
    assert model_seconds(6, 5 * MBIT, 20 * MBIT, 1.0, PROFILE) == pytest.approx(
        6 * 0.030 + 5 / 8 + 20 / 16 + 1.0
    )
    wire_up, wire_down = 40_010_000, 20_000
    expected = 0.7 + sum(COMPUTE.values()) + 6 * 0.030 + wire_up / (8 * MBIT) + wire_down / (16 * MBIT)
    assert run_model(FIRST, COMPUTE, 0.7, wire_up, wire_down, PROFILE) == pytest.approx(expected)
    # one query on an open connection: its own call, one round, its payload
    assert query_model(FIRST, COMPUTE, PROFILE) == pytest.approx(
        1.5 + 0.030 + 1700 / (8 * MBIT) + 12_500 / (16 * MBIT)
    )
    with pytest.raises(KeyError):  # a call the loopback baseline never made has no compute term
        run_model([*FIRST, Call("Labels", 0.1, 1, 1)], COMPUTE, 0, 0, 0, PROFILE)


def test_the_crossover_is_where_the_lines_meet():
    # one round with 1.5 s of compute against two rounds with 0.1 s: equal at RTT 1.4 s
    assert crossover_rtt(1.5, 1, 0.1, 2) == pytest.approx(1.4)
    assert crossover_rtt(0.1, 2, 1.5, 1) == pytest.approx(1.4)
    assert crossover_rtt(0.1, 1, 1.5, 2) is None  # fewer rounds and faster: no crossing
    assert crossover_rtt(1.0, 2, 2.0, 2) is None


def _run(calls, keygen=0.7, wire=(40_010_000, 20_000)):
    return ClientRun(calls, 12.0, keygen, 3.0, 2.0, wire[0], wire[1], 40_000_000)


def test_a_row_puts_the_measurement_beside_its_model():
    compute = compute_terms([_run(FIRST), _run([Call(c.method, 3 * c.seconds, 0, 0) for c in FIRST])])
    assert compute["Classify"] == pytest.approx(4.0)  # the median of 2.0 and 6.0
    shaped = row("thermo", PROFILE, "first", _run(FIRST), COMPUTE)
    assert list(shaped) == COLUMNS
    assert shaped["run_s"] == pytest.approx(0.7 + 11.3)
    assert shaped["query_s"] == 2.0 and shaped["upload_s"] == 9.0 and shaped["setup_s"] == pytest.approx(0.3)
    model = run_model(FIRST, COMPUTE, 0.7, 40_010_000, 20_000, PROFILE)
    assert shaped["model_run_s"] == pytest.approx(model)
    assert shaped["run_gap"] == pytest.approx(12.0 / model - 1)
    assert (shaped["query_rounds"], shaped["query_up"], shaped["query_down"]) == (1, 1700, 12_500)
    assert not shaped["reuploaded"]
    # the figures' lines start from the run's fixed part: key generation and compute
    assert link_figures.run_fixed(pd.Series(shaped)) == pytest.approx(0.7 + sum(COMPUTE.values()))
    assert link_figures.query_fixed(pd.Series(shaped)) == pytest.approx(COMPUTE["Classify"])
    baseline = row("thermo", LOOPBACK, "first", _run(FIRST, wire=(0, 0)), COMPUTE)
    assert baseline["model_run_s"] is None and baseline["run_gap"] is None  # loopback has no link terms
    later = row("thermo", PROFILE, "later", _run([*FIRST[:2], *FIRST[2:]]), COMPUTE)
    assert later["reuploaded"]  # a later run that uploaded keys again is marked


def test_figures_without_a_measured_point_are_not_drawn(tmp_path):
    paillier = [
        Call("ListModels", 0.1, 0, 200),
        Call("Distances", 0.2, 2840, 5152),
        Call("Labels", 0.1, 11, 5),
    ]
    frame = pd.DataFrame(
        [
            row("thermo", PROFILE, "first", _run(FIRST), COMPUTE),
            row("thermo", LOOPBACK, "first", _run(FIRST, wire=(0, 0)), COMPUTE),
        ],
        columns=COLUMNS,
    )
    # no later query: neither the RTT figure nor the crossover; nothing written
    assert link_figures.rtt_figure(frame, tmp_path, "") is None
    assert link_figures.crossover_figure(frame, tmp_path, "") is None
    assert not list(tmp_path.iterdir())
    compute = {**COMPUTE, "Distances": 0.05, "Labels": 0.001}
    later = pd.DataFrame(
        [
            row("thermo", PROFILE, "later", _run([FIRST[0], FIRST[1], FIRST[3]], 0, (5000, 16000)), COMPUTE),
            row("paillier", PROFILE, "later", _run(paillier, 0.8, (3600, 5800)), compute),
        ],
        columns=COLUMNS,
    )
    ((family, at),) = link_figures.crossovers(later)
    transfer = (1700 - 2851) / (20 * MBIT) + (12_500 - 5157) / (100 * MBIT)
    assert family == "thermo" and at == pytest.approx(1.5 - 0.051 + transfer)
    # the summary keeps the named profiles and loopback (the RTT sweep's links are in the figures)
    summary = summarise(pd.concat([frame, later]))
    assert list(summary.profile) == ["loopback"] and math.isnan(summary.run_gap.iloc[0])


def test_a_first_query_moved_to_another_link_changes_only_by_its_link_terms():
    measured = pd.Series(row("thermo", PROFILE, "first", _run(FIRST), COMPUTE))
    same = link_figures.moved(measured, PROFILE)
    assert same == pytest.approx({"keygen_s": 0.7, "setup_s": 0.3, "upload_s": 9.0, "query_s": 2.0})
    slow = LinkProfile("slow", up_mbit=4, down_mbit=8, rtt_ms=130)
    there = link_figures.moved(measured, slow)
    upload_bytes = 40_010_000 - 1700  # the wire bytes up that are not the query's
    assert there["keygen_s"] == 0.7
    assert there["setup_s"] - same["setup_s"] == pytest.approx((2 + HANDSHAKE_ROUNDS) * 0.1)
    assert there["upload_s"] - same["upload_s"] == pytest.approx(
        0.1 + upload_bytes / (4 * MBIT) - upload_bytes / (8 * MBIT)
    )
    query = 0.1 + 1700 / (4 * MBIT) - 1700 / (8 * MBIT) + 12_500 / (8 * MBIT) - 12_500 / (16 * MBIT)
    assert there["query_s"] - same["query_s"] == pytest.approx(query)
