"""The analysis controller over gRPC on loopback, driven by the analyst's tools."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
import os
import time

import grpc
import numpy as np
import pandas as pd
import pytest
from controller_calls import open_session, reveal, status_of
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from petlab.client.analyst import describe, keygen, main, open_request, prepare, run
from petlab.client.knn_client import make_channel
from petlab.crypto.chain.certification import certify
from petlab.crypto.chain.instructions import canonical_json
from petlab.crypto.chain.traces import ANALYST_DOMAIN, public_key_bytes, public_key_pem, seal
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc
from petlab.server.controller.analyses import AnalysisError, evaluate
from petlab.server.controller.output_checking import ACRO_PARITY, check
from petlab.server.controller.people import key_person
from petlab.server.controller.query_set_control import QuerySetControl
from petlab.server.main import parse_args

ANALYST = Ed25519PrivateKey.generate()
AUTHORITY = Ed25519PrivateKey.generate()

GOOD = [
    {"type": "frequency", "rows": "sex", "columns": "incc"},
    {"type": "magnitude", "rows": "sex", "value": "hpw", "statistic": "mean"},
    {"type": "regression", "outcome": "hpw", "predictors": ["age", "edu"]},
    {"type": "mean", "column": "age", "where": {"ms": {"eq": 1}}},
]


@pytest.fixture()
def server(serve, tmp_path):
    with serve(
        tmp_path, analysis_data=acs_sample_path(), open_analysis=True, analysis_cooldown_seconds=0
    ) as running:
        yield running


def test_sequence_runs_to_the_end(channel):
    out = io.StringIO()
    assert run(prepare(GOOD, ANALYST), channel, out=out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and all(line.startswith(f"analysis {j}: {{") for j, line in enumerate(lines, 1))
    table = json.loads(lines[0].split(": ", 1)[1])
    assert sum(table["cells"].values()) == 5000


def confidential(server) -> str:
    """The controller's confidential diagnostics (exact refusal reasons), owner-only."""
    path = server.controller.diagnostics.path
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    assert text.startswith("# CONFIDENTIAL")
    return text


def test_disclosive_output_aborts_and_hides_the_rest(channel, server, caplog):
    small = {"type": "count", "where": {"age": {"eq": 27}, "occ": {"eq": 1}}}
    document = prepare([GOOD[0], small, GOOD[1]], ANALYST)
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="petlab.server.controller.service"):
        assert run(document, channel, out=out) == 3
    assert "analysis 2: ABORTED" in out.getvalue() and "withheld: disclosure control" in out.getvalue()
    assert "fewer than 10" not in out.getvalue() and "fewer than 10" in confidential(server)
    assert "fewer than 10" not in caplog.text  # the ordinary log names the category only
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    assert (
        status_of(stub.Next, controller_pb2.NextRequest(session_id="0" * 32, trace=b"\x00" * 64))
        == grpc.StatusCode.NOT_FOUND
    )


def test_tracker_attack_through_the_service(channel, server, caplog):
    document = prepare(
        [
            {"type": "count", "where": {"sex": {"eq": 1}}},
            {"type": "count", "where": {"sex": {"eq": 1}, "hpw": {"ne": 31}}},
        ],
        ANALYST,
    )
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="petlab.server.controller.service"):
        assert run(document, channel, out=out) == 3
    refusal = out.getvalue().splitlines()[-2]
    assert refusal == "analysis 2: ABORTED: analysis 2: withheld: disclosure control"
    assert "query-set-size control" in confidential(server)  # the exact figure stays there
    assert "record(s)" not in caplog.text and "withheld: disclosure control" in caplog.text


def test_changed_or_malformed_traces(channel):
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    document = prepare(GOOD[:2], ANALYST)
    session = open_session(stub, document)
    # malformed: refused, and the session is untouched
    assert (
        status_of(stub.Next, controller_pb2.NextRequest(session_id=session, trace=b"short"))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert reveal(stub, session, document, 1).WhichOneof("outcome") == "result_json"
    # substitution: a different 64-byte trace yields gibberish, the session aborts
    reply = stub.Next(controller_pb2.NextRequest(session_id=session, trace=os.urandom(64)), timeout=30)
    assert "the sequence was changed" in reply.abort_reason
    assert (
        status_of(stub.Next, controller_pb2.NextRequest(session_id=session, trace=os.urandom(64)))
        == grpc.StatusCode.FAILED_PRECONDITION
    )
    # the same T_0 cannot be replayed in a new session
    assert (
        status_of(
            stub.OpenSession,
            controller_pb2.OpenSessionRequest(
                first_trace=bytes.fromhex(document["traces"][0]),
                analyst_public_key=document["analyst_public_key"].encode(),
                analyst_signature=bytes.fromhex(document["analyst_signature"]),
            ),
        )
        == grpc.StatusCode.ALREADY_EXISTS
    )


def test_bad_signatures_and_keys(channel):
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    document = prepare(GOOD[:1], ANALYST)
    other = prepare(GOOD[1:2], ANALYST)
    request = controller_pb2.OpenSessionRequest(
        first_trace=bytes.fromhex(other["traces"][0]),
        analyst_public_key=document["analyst_public_key"].encode(),
        analyst_signature=bytes.fromhex(document["analyst_signature"]),
    )
    assert status_of(stub.OpenSession, request) == grpc.StatusCode.UNAUTHENTICATED
    request.analyst_public_key = b"not a key"
    assert status_of(stub.OpenSession, request) == grpc.StatusCode.INVALID_ARGUMENT
    request.first_trace = b"\x00" * 10
    assert status_of(stub.OpenSession, request) == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "mean", "column": "salary"}, "no column named 'salary'"),
        ({"type": "mean"}, "invalid analysis spec"),
    ],
)
def test_bad_specs_abort_with_invalid_argument(channel, spec, message):
    """A committed spec that cannot run: INVALID_ARGUMENT, the session ends, nothing is released."""
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    sequence = seal([canonical_json(spec), canonical_json(GOOD[0])], ANALYST)
    document = {
        "traces": [t.hex() for t in sequence.traces],
        "pointers": sequence.pointers,
        "specs": {p: s.decode() for p, s in sequence.specs.items()},
        "analyst_public_key": public_key_pem(ANALYST.public_key()).decode(),
        "analyst_signature": sequence.analyst_signature.hex(),
        "authority_signature": None,
    }
    session = open_session(stub, document)
    with pytest.raises(grpc.RpcError) as failure:
        reveal(stub, session, document, 1)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in failure.value.details() and "aborted" in failure.value.details()
    with pytest.raises(grpc.RpcError) as again:
        reveal(stub, session, document, 2)
    assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_sessions_survive_a_restart(serve, tmp_path):
    document = prepare(GOOD[:3], ANALYST)
    with (
        serve(tmp_path, analysis_data=acs_sample_path(), open_analysis=True) as first,
        make_channel(f"127.0.0.1:{first.port}") as channel,
    ):
        stub = controller_pb2_grpc.AnalysisControllerStub(channel)
        session = open_session(stub, document)
        assert reveal(stub, session, document, 1).position == 1
    with (
        serve(tmp_path, analysis_data=acs_sample_path(), open_analysis=True) as second,
        make_channel(f"127.0.0.1:{second.port}") as channel,
    ):
        stub = controller_pb2_grpc.AnalysisControllerStub(channel)
        assert reveal(stub, session, document, 2).position == 2
        assert reveal(stub, session, document, 3).last


def test_certification_authority(serve, tmp_path):
    """The authority's co-signature opens a session only at the controller, data set and rules it
    names, and only until it expires; each refusal through the service."""
    authority_pub = tmp_path / "authority.pub.pem"
    authority_pub.write_bytes(public_key_pem(AUTHORITY.public_key()))
    with (
        serve(
            tmp_path, analysis_data=acs_sample_path(), authority_key=authority_pub, controller_id="acs-2013"
        ) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        controller = describe(channel)
        assert controller["controller_id"] == "acs-2013" and controller["instruction_format"] == 2
        # keyed (test_controller_confidential_figures): HMAC-SHA256 under the owner's key
        key = bytes.fromhex((tmp_path / "dataset-digest-key").read_text())
        keyed = hmac.new(key, acs_sample_path().read_bytes(), hashlib.sha256).hexdigest()
        assert controller["dataset_sha256"] == keyed
        document = prepare(GOOD[:2], ANALYST)
        with pytest.raises(grpc.RpcError) as failure:
            run(document, channel, out=io.StringIO())
        assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "co-signature" in failure.value.details()
        policy = {"allowed_types": ["frequency", "magnitude"], "forbidden_columns": ["race"]}
        elsewhere = [
            {**controller, "controller_id": "another-controller"},
            {**controller, "dataset_sha256": "00" * 32},
            {**controller, "rules_sha256": "00" * 32},
        ]
        for scope in elsewhere:
            with pytest.raises(grpc.RpcError) as failure:
                run(
                    certify(prepare(GOOD[:2], ANALYST), policy, AUTHORITY, scope, person="alice"),
                    channel,
                    out=io.StringIO(),
                )
            assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
        expired = certify(
            prepare(GOOD[:2], ANALYST),
            policy,
            AUTHORITY,
            controller,
            60,
            now=time.time() - 120,
            person="alice",
        )
        with pytest.raises(grpc.RpcError) as failure:
            run(expired, channel, out=io.StringIO())
        assert "expired" in failure.value.details()
        later = certify(document, policy, AUTHORITY, controller, person="alice")
        stretched = {**later, "certification": {**later["certification"], "expires": 2**40}}
        with pytest.raises(grpc.RpcError) as failure:
            run(stretched, channel, out=io.StringIO())
        assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert run(later, channel, out=io.StringIO()) == 0
    with pytest.raises(ValueError, match="does not allow"):
        certify(
            prepare([GOOD[2]], ANALYST),
            {"allowed_types": ["frequency"]},
            AUTHORITY,
            controller,
            person="alice",
        )
    with pytest.raises(ValueError, match="forbidden column"):
        certify(
            prepare([{"type": "frequency", "rows": "race"}], ANALYST),
            {"forbidden_columns": ["race"]},
            AUTHORITY,
            controller,
            person="alice",
        )
    tampered = prepare(GOOD[:2], ANALYST)
    tampered["specs"]["#2"] = canonical_json({**GOOD[1], "value": "age"}).decode()
    with pytest.raises(ValueError, match="does not match its hash"):
        certify(tampered, {}, AUTHORITY, controller, person="alice")
    with pytest.raises(ValueError, match="prepare the sequence again"):
        run({**document, "version": 1}, channel, out=io.StringIO())


def test_certification_from_the_command_line(serve, tmp_path, capsys):
    """The analyst's flow (docs how-to/analyst.md), CLI only: describe, certify for that controller, run."""
    authority_key, analyst_key = tmp_path / "authority.pem", tmp_path / "analyst.pem"
    keygen(authority_key)
    keygen(analyst_key)
    analyses, sequence, controller = (tmp_path / n for n in ("analyses.json", "sequence.json", "c.json"))
    analyses.write_text(json.dumps({"analyses": GOOD[:2]}))
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"max_analyses": 5}))
    with serve(
        tmp_path, analysis_data=acs_sample_path(), authority_key=authority_key.with_suffix(".pub.pem")
    ) as running:
        server = f"127.0.0.1:{running.port}"
        assert main(["prepare", str(analyses), "--key", str(analyst_key), "--out", str(sequence)]) == 0
        assert main(["run", str(sequence), "--server", server]) == 3  # not certified: refused
        assert "UNAUTHENTICATED" in capsys.readouterr().err
        assert main(["describe", "--server", server, "--out", str(controller)]) == 0
        certify_args = ["certify", str(sequence), "--policy", str(policy), "--key", str(authority_key)]
        assert (
            main([*certify_args, "--controller", str(controller), "--valid-days", "1", "--person", "ann"])
            == 0
        )
        assert "until" in capsys.readouterr().out
        assert main(["run", str(sequence), "--server", server]) == 0
        assert "analysis 2:" in capsys.readouterr().out


def test_command_line(tmp_path, server, capsys):
    key = tmp_path / "analyst.pem"
    keygen(key)
    assert key.stat().st_mode & 0o777 == 0o600 and key.with_suffix(".pub.pem").is_file()
    analyses = tmp_path / "analyses.json"
    analyses.write_text(json.dumps({"analyses": GOOD[:2]}))
    sequence = tmp_path / "sequence.json"
    assert main(["prepare", str(analyses), "--key", str(key), "--out", str(sequence)]) == 0
    assert sequence.stat().st_mode & 0o777 == 0o600
    assert main(["run", str(sequence), "--server", f"127.0.0.1:{server.port}"]) == 0
    assert "analysis 2:" in capsys.readouterr().out
    analyses.write_text(json.dumps([{"type": "mean", "colum": "age"}]))
    assert main(["prepare", str(analyses), "--key", str(key), "--out", str(sequence)]) == 2
    assert "analysis 1 is invalid" in capsys.readouterr().err


# ---------------------------------------------------------------- attacks

DATA = pd.read_csv(acs_sample_path())


def _four_set_tracker() -> list[dict]:
    """Four means, each over a large set and pairwise far apart, whose inclusion-exclusion is the
    one record in A and B: mean(A) n_A + mean(B) n_B + mean(neither) n_neither - mean(all) N."""
    men = DATA.sex == 1
    for column in ("occ", "age", "edu", "waob", "rel"):
        for value, group in DATA.groupby(column):
            if len(group) > 10 and int((group.sex == 1).sum()) == 1:
                value = int(value)
                return [
                    {"type": "mean", "column": "hpw", "where": {"sex": {"eq": 1}}},
                    {"type": "mean", "column": "hpw", "where": {column: {"eq": value}}},
                    {
                        "type": "mean",
                        "column": "hpw",
                        "where": {"sex": {"ne": 1}, column: {"ne": int(value)}},
                    },
                    {"type": "mean", "column": "hpw"},
                ]
    raise AssertionError(f"no single-man group found ({int(men.sum())} men)")


def test_four_set_tracker_is_refused(channel, server, caplog):
    """Attack: pairwise query-set control alone lets this sequence through, and the four released
    means give the hours worked of the one man in B exactly. The exact audit refuses the third: N is
    public (the audit always counts the universe as released), so A, B and "neither" already
    complete the tracker."""
    tracker = _four_set_tracker()
    pairwise = QuerySetControl(len(DATA), 10)
    masks = [evaluate(spec, DATA).query_sets[0] for spec in tracker]
    assert pairwise.violation(masks) is None  # pairwise control alone: all pairs pass
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="petlab.server.controller.service"):
        assert run(prepare(tracker, ANALYST), channel, out=out) == 3
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["analysis 1", "analysis 2", "analysis 3"]
    assert all("ABORTED" not in line for line in lines[:2])
    assert lines[2] == "analysis 3: ABORTED: analysis 3: withheld: disclosure control"
    assert "linear combination" in confidential(server) and "linear combination" not in caplog.text


@pytest.mark.parametrize(
    "probabilities",
    [[0, 1], [0.0, 0.5], [1.0], [0.05], [i / 9 for i in range(10)]],
)
def test_quantiles_cannot_return_records(probabilities):
    """Attack: [0, 1] returned the minimum and maximum that min/max refuse, and [0, 1/9, ..., 1] on
    a 10-record set returned all ten values. Decided on the spec alone: the analysis cannot run,
    which is no refusal (the error says so: not data-dependent, so the service counts nothing)."""
    ten = DATA.index[DATA.age == 27][:10]
    frame = DATA.loc[ten] if probabilities[-1] == 1 and len(probabilities) == 10 else DATA
    with pytest.raises(AnalysisError, match="quantile probability") as refused:
        evaluate({"type": "quantiles", "column": "hpw", "probabilities": probabilities}, frame)
    assert not refused.value.data_dependent


def test_quantiles_in_the_allowed_set_are_released():
    spec = {"type": "quantiles", "column": "hpw", "probabilities": [0.25, 0.5, 0.75]}
    assert check(evaluate(spec, DATA)).release


def test_single_record_regression_is_refused():
    """Attack: where exactly one record of the query set has some predictor value, least squares
    fits it exactly, so intercept + slope is that person's outcome."""
    for value in sorted(DATA.occ.unique()):
        subset = DATA[(DATA.age == 27) & DATA.occ.isin([value, 23])]
        if (subset.occ == value).sum() == 1 and len(subset) >= 13 and value != 23:
            break
    else:
        raise AssertionError("no single-record predictor value found")
    spec = {
        "type": "regression",
        "outcome": "hpw",
        "predictors": ["occ"],
        "where": {"age": {"eq": 27}, "occ": {"in": [int(value), 23]}},
    }
    evaluated = evaluate(spec, DATA)
    assert evaluated.residual_dof >= 10  # the degrees-of-freedom rule alone releases it
    assert check(evaluated, ACRO_PARITY).release
    assert evaluated.max_leverage == pytest.approx(1.0)
    assert not check(evaluated).release


def test_refusals_name_no_figures(channel):
    """Attack: a refusal text that stated exact withheld counts ("leaves out only 2 records", "1
    cell is empty") would be a release. The analyst sees a category only."""
    attempts = [
        [{"type": "count", "where": {"age": {"eq": 27}, "occ": {"eq": 1}}}],
        [{"type": "frequency", "rows": "race", "columns": "waob"}],
        [{"type": "count", "where": {"age": {"ne": 64}}}],
    ]
    for specs in attempts:
        out = io.StringIO()
        run(prepare(specs, ANALYST), channel, out=out)
        refusal = out.getvalue().splitlines()[0]
        assert refusal.endswith("withheld: disclosure control"), refusal
        assert not any(ch.isdigit() for ch in refusal.replace("analysis 1", "")), refusal


def test_broken_spec_ends_the_session_cleanly(channel):
    """A spec that makes the interpreter fail (deeply nested values, wrong types) gives a generic
    abort, never UNKNOWN with Python's message, and the session is over."""
    nested: dict = {"eq": 1}
    for _ in range(200):
        nested = {"eq": nested}
    for bad in (
        {"type": "count", "where": {"age": nested}},
        {"type": "mean", "column": "hpw", "where": {"age": {"between": ["a", {}]}}},
    ):
        out = io.StringIO()
        try:
            status = run(prepare([bad], ANALYST), channel, out=out)
        except grpc.RpcError as exc:  # refused as invalid input: a documented status, not UNKNOWN
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.details()
            continue
        assert status != 0 and "Traceback" not in out.getvalue()


def test_analysis_needs_registered_identities(serve, tmp_path):
    """A server refuses to serve analysis data with no allow-list and no authority unless told
    --open-analysis; with an allow-list, a fresh key per question is refused outright."""
    with (
        pytest.raises(ValueError, match="registered analysts"),
        serve(tmp_path, analysis_data=acs_sample_path()),
    ):
        pass
    allow = tmp_path / "analysts.pem"
    allow.write_bytes(public_key_pem(ANALYST.public_key()))
    options, _ = parse_args(
        [
            "serve",
            "--analysis-data",
            str(acs_sample_path()),
            "--analysts",
            str(allow),
            "--analysis-cooldown-seconds",
            "60",
        ]
    )
    controller = options.controller
    assert controller.analysts == allow and controller.analysis_cooldown_seconds == 60
    settings = {"analysis_data": controller.analysis_data, "analysts": allow, "analysis_cooldown_seconds": 60}
    with serve(tmp_path / "srv", **settings) as running, make_channel(f"127.0.0.1:{running.port}") as channel:
        stranger = Ed25519PrivateKey.generate()
        stub = controller_pb2_grpc.AnalysisControllerStub(channel)
        denied = status_of(stub.OpenSession, open_request(prepare(GOOD[:1], stranger)))
        assert denied == grpc.StatusCode.PERMISSION_DENIED
        out = io.StringIO()
        assert (
            run(
                prepare([{"type": "count", "where": {"age": {"eq": 27}, "occ": {"eq": 1}}}], ANALYST),
                channel,
                out=out,
            )
            == 3
        )
        # after an abort the identity waits out the cool-down
        waiting = status_of(stub.OpenSession, open_request(prepare(GOOD[:1], ANALYST)))
        assert waiting == grpc.StatusCode.FAILED_PRECONDITION


def test_squatted_first_trace_does_not_lock_out_its_owner(channel):
    """Attack: anyone who saw a victim's T_0 opens a session with it first (signing it with their
    own key) to lock the victim out. T_0 is unique per analyst identity, so the victim is not."""
    victim = prepare(GOOD[:1], ANALYST)
    squatter = Ed25519PrivateKey.generate()
    stolen = dict(victim)
    stolen["analyst_public_key"] = public_key_pem(squatter.public_key()).decode()
    stolen["analyst_signature"] = squatter.sign(ANALYST_DOMAIN + bytes.fromhex(victim["traces"][0])).hex()
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    open_session(stub, stolen)
    out = io.StringIO()
    assert run(victim, channel, out=out) == 0


@settings(max_examples=40)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(-5, 50)), min_size=1, max_size=60),
    st.booleans(),
    st.sampled_from(["sum", "mean"]),
)
def test_group_by_tables_equal_the_cell_by_cell_definition(records, two_way, statistic):
    """The one-pass group-by against the definition: one scan of the data per cell."""
    data = pd.DataFrame(records, columns=["r", "c", "v"])
    spec = {"type": "magnitude", "rows": "r", "value": "v", "statistic": statistic}
    if two_way:
        spec["columns"] = "c"
    spec["where"] = {"v": {"between": [0, 40]}}
    evaluated = evaluate(spec, data)
    selected = data["v"].between(0, 40).to_numpy()
    rows, cols = sorted(data["r"].unique()), sorted(data["c"].unique()) if two_way else [None]
    for index, (r, c) in enumerate((r, c) for r in rows for c in cols):
        cell = selected & (data["r"] == r).to_numpy() & ((data["c"] == c).to_numpy() if two_way else True)
        assert np.array_equal(evaluated.query_sets[index], cell)
        assert sorted(evaluated.values[index]) == sorted(data.loc[cell, "v"].astype(float))
        total = float(data.loc[cell, "v"].sum())
        expected = total if statistic == "sum" else (total / cell.sum() if cell.any() else None)
        key = f"{r}" if not two_way else f"{r}|{c}"
        assert evaluated.result["cells"][key] == pytest.approx(expected)
        assert evaluated.counts.loc[r, str(c)] == cell.sum()


def test_tables_are_capped(channel):
    """A table with more cells than the cap is refused before it is computed (INVALID_ARGUMENT)."""
    wide = pd.DataFrame({"r": np.arange(40), "c": np.arange(40) % 30, "v": 1.0})
    with pytest.raises(AnalysisError, match="at most 1000 cells"):
        evaluate({"type": "frequency", "rows": "r", "columns": "c"}, wide)
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    document = prepare([{"type": "frequency", "rows": "hpw", "columns": "age"}], ANALYST)
    session = open_session(stub, document)
    with pytest.raises(grpc.RpcError) as failure:
        reveal(stub, session, document, 1)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "1000 cells" in failure.value.details()


def test_one_analyst_does_not_hold_up_another(channel, server):
    """Steps lock per analyst, not globally: while one analyst's step is in progress (its lock held
    here), another analyst's analysis is answered."""
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    busy, other = prepare(GOOD[:1], ANALYST), prepare(GOOD[:1], Ed25519PrivateKey.generate())
    busy_session, other_session = open_session(stub, busy), open_session(stub, other)
    servicer = server.controller
    held = servicer._lock_of(key_person(public_key_bytes(ANALYST.public_key())))
    with held:
        assert reveal(stub, other_session, other, 1).WhichOneof("outcome") == "result_json"
        with pytest.raises(grpc.RpcError) as failure:
            stub.Next(
                controller_pb2.NextRequest(
                    session_id=busy_session,
                    trace=bytes.fromhex(busy["traces"][1]),
                    pointer=busy["pointers"][0],
                    spec=busy["specs"][busy["pointers"][0]].encode(),
                ),
                timeout=1,
            )
        assert failure.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(0.5)  # the server's copy of the deadline (sent as a timeout) has passed too
    # the abandoned step did not run: the busy analyst's sequence continues where it was
    assert reveal(stub, busy_session, busy, 1).WhichOneof("outcome") == "result_json"


def test_an_old_session_database_is_migrated(tmp_path):
    """A database whose sessions table makes T_0 unique across analysts is rebuilt with the
    per-analyst key at start, keeping its sessions; then a squatter locks nobody out."""
    import sqlite3

    from petlab.server.controller.session_store import SessionStore

    path = tmp_path / "sessions.sqlite"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, analyst_key BLOB NOT NULL,"
        " first_trace BLOB NOT NULL UNIQUE, previous_trace BLOB NOT NULL, position INTEGER NOT NULL,"
        " status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', created REAL, updated REAL);"
        "INSERT INTO sessions VALUES ('s1', x'01', x'aa', x'aa', 2, 'open', '', 0, 0);"
    )
    old.commit()
    old.close()
    store = SessionStore(path)
    assert store.get("s1").position == 2
    assert store.open(b"\x02", b"\xaa") is not None  # another analyst, the same T_0
    assert store.open(b"\x01", b"\xaa") is None  # the same analyst replaying it
    store.close()


def test_the_analyst_tool_does_not_import_concrete():
    """``petlab-analyst`` never encrypts: it must not load concrete-python (and print setuptools'
    pkg_resources warning on every call)."""
    import subprocess
    import sys

    code = "import sys, petlab.client.analyst; sys.exit('concrete' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
