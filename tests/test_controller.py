"""The analysis controller over gRPC on loopback, driven by the analyst's tools."""

from __future__ import annotations

import io
import json
import os

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from petlab.client.analyst import certify, keygen, main, prepare, run
from petlab.client.knn_client import make_channel
from petlab.crypto.instructions import canonical_json
from petlab.crypto.trace_chain import public_key_pem, seal
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc

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
    with serve(tmp_path, analysis_data=acs_sample_path()) as running:
        yield running


@pytest.fixture()
def channel(server):
    with make_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel


def open_session(stub, document: dict) -> str:
    return stub.OpenSession(
        controller_pb2.OpenSessionRequest(
            first_trace=bytes.fromhex(document["traces"][0]),
            analyst_public_key=document["analyst_public_key"].encode(),
            analyst_signature=bytes.fromhex(document["analyst_signature"]),
            authority_signature=bytes.fromhex(document["authority_signature"] or ""),
        ),
        timeout=30,
    ).session_id


def reveal(stub, session_id: str, document: dict, j: int):
    pointer = document["pointers"][j - 1]
    return stub.Next(
        controller_pb2.NextRequest(
            session_id=session_id,
            trace=bytes.fromhex(document["traces"][j]),
            pointer=pointer,
            spec=document["specs"][pointer].encode(),
        ),
        timeout=60,
    )


def status_of(call, *args) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as failure:
        call(*args, timeout=30)
    assert failure.value.details()
    return failure.value.code()


def test_sequence_runs_to_the_end(channel):
    out = io.StringIO()
    assert run(prepare(GOOD, ANALYST), channel, out=out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and all(line.startswith(f"analysis {j}: {{") for j, line in enumerate(lines, 1))
    table = json.loads(lines[0].split(": ", 1)[1])
    assert sum(table["cells"].values()) == 5000


def test_disclosive_output_aborts_and_hides_the_rest(channel):
    document = prepare([GOOD[0], {"type": "max", "column": "hpw"}, GOOD[1]], ANALYST)
    out = io.StringIO()
    assert run(document, channel, out=out) == 3
    assert "analysis 2: ABORTED" in out.getvalue() and "single record" in out.getvalue()
    stub = controller_pb2_grpc.AnalysisControllerStub(channel)
    assert (
        status_of(stub.Next, controller_pb2.NextRequest(session_id="0" * 32, trace=b"\x00" * 64))
        == grpc.StatusCode.NOT_FOUND
    )


def test_tracker_attack_through_the_service(channel, server):
    document = prepare(
        [
            {"type": "count", "where": {"sex": {"eq": 1}}},
            {"type": "count", "where": {"sex": {"eq": 1}, "hpw": {"ne": 31}}},
        ],
        ANALYST,
    )
    out = io.StringIO()
    assert run(document, channel, out=out) == 3
    assert "query-set-size control" in out.getvalue()


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
        serve(tmp_path, analysis_data=acs_sample_path()) as first,
        make_channel(f"127.0.0.1:{first.port}") as channel,
    ):
        stub = controller_pb2_grpc.AnalysisControllerStub(channel)
        session = open_session(stub, document)
        assert reveal(stub, session, document, 1).position == 1
    with (
        serve(tmp_path, analysis_data=acs_sample_path()) as second,
        make_channel(f"127.0.0.1:{second.port}") as channel,
    ):
        stub = controller_pb2_grpc.AnalysisControllerStub(channel)
        assert reveal(stub, session, document, 2).position == 2
        assert reveal(stub, session, document, 3).last


def test_certification_authority(serve, tmp_path):
    authority_pub = tmp_path / "authority.pub.pem"
    authority_pub.write_bytes(public_key_pem(AUTHORITY.public_key()))
    with (
        serve(tmp_path, analysis_data=acs_sample_path(), authority_key=authority_pub) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        document = prepare(GOOD[:2], ANALYST)
        with pytest.raises(grpc.RpcError) as failure:
            run(document, channel, out=io.StringIO())
        assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "co-signature" in failure.value.details()
        policy = {"allowed_types": ["frequency", "magnitude"], "forbidden_columns": ["race"]}
        assert run(certify(document, policy, AUTHORITY), channel, out=io.StringIO()) == 0
    with pytest.raises(ValueError, match="does not allow"):
        certify(prepare([GOOD[2]], ANALYST), {"allowed_types": ["frequency"]}, AUTHORITY)
    with pytest.raises(ValueError, match="forbidden column"):
        certify(
            prepare([{"type": "frequency", "rows": "race"}], ANALYST),
            {"forbidden_columns": ["race"]},
            AUTHORITY,
        )
    tampered = prepare(GOOD[:2], ANALYST)
    tampered["specs"]["analysis-2"] = canonical_json({**GOOD[1], "value": "age"}).decode()
    with pytest.raises(ValueError, match="does not match its hash"):
        certify(tampered, {}, AUTHORITY)


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
