"""Hypothesis fuzzing of every RPC of every service the server exposes. The
methods are read from the services' descriptors, so a new RPC is fuzzed without an edit.

Each RPC gets random bytes and mutations (bit flips, truncations, insertions) of a valid request
of its own, sent raw over a real loopback channel. Every answer must be OK or a status the
services document; UNKNOWN (an unhandled exception) and INTERNAL (for instance gRPC's own answer to
an undecodable request) are failures, and so is a call that outlives its deadline. Afterwards the
server still answers health checks. The server holds no real key material (a planted junk key
stands for a registered one), so no call reaches an FHE evaluation and the test stays cheap.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from petlab import protos
from petlab.client.analyst import prepare
from petlab.client.knn_client import make_channel
from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.paillier_knn import generate_keypair
from petlab.plaindata import acs_sample_path
from petlab.protos import controller_pb2, controller_pb2_grpc, knn_pb2, paillier_pb2

DOCUMENTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
# no shrinking: a failure is reported with the request as found, and a failing run stays short
FUZZ = settings(
    max_examples=100,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
TIMEOUT = 10.0
ANALYSES = [
    {"type": "frequency", "rows": "sex", "columns": "incc"},
    {"type": "mean", "column": "age", "where": {"ms": {"eq": 1}}},
]


@pytest.fixture(scope="module")
def running(serve, hosted_model, tmp_path_factory):
    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    with serve(
        tmp_path_factory.mktemp("fuzz-server"),
        hosted,
        enable_paillier_baseline=True,
        analysis_data=acs_sample_path(),
        open_analysis=True,
        analysis_cooldown_seconds=0,
    ) as server:
        yield server


@pytest.fixture(scope="module")
def channel(running):
    with make_channel(f"127.0.0.1:{running.port}") as channel:
        yield channel


def _junk_key(running) -> str:
    data = b"junk standing in for evaluation keys"
    return running.keys.put("iris", "fuzz", len(data), hashlib.sha256(data).hexdigest(), [data]).key_id


@pytest.fixture(scope="module")
def valid(running, channel) -> dict[str, list[bytes]]:
    """One valid request (a list of messages for client streams) per method path."""
    key_id = _junk_key(running)
    document = prepare(ANALYSES, Ed25519PrivateKey.generate())
    session = (
        controller_pb2_grpc.AnalysisControllerStub(channel)
        .OpenSession(
            controller_pb2.OpenSessionRequest(
                first_trace=bytes.fromhex(document["traces"][0]),
                analyst_public_key=document["analyst_public_key"].encode(),
                analyst_signature=bytes.fromhex(document["analyst_signature"]),
            ),
            timeout=TIMEOUT,
        )
        .session_id
    )
    other = prepare(ANALYSES[::-1], Ed25519PrivateKey.generate())
    pointer = document["pointers"][0]
    public, _ = generate_keypair(512)
    cipher = public.encrypt(3).ciphertext().to_bytes(128, "big")
    keys = b"not keys, but the announced size and digest match"
    messages = {
        "/petlab.knn.v1.KnnService/ListModels": [knn_pb2.ListModelsRequest()],
        "/petlab.knn.v1.KnnService/GetClientSpecs": [knn_pb2.GetClientSpecsRequest(model="iris")],
        "/petlab.knn.v1.KnnService/RegisterKeys": [
            knn_pb2.KeyChunk(
                model="iris", total_size=len(keys), sha256=hashlib.sha256(keys).hexdigest(), data=keys[:20]
            ),
            knn_pb2.KeyChunk(data=keys[20:]),
        ],
        "/petlab.knn.v1.KnnService/Classify": [
            knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=b"\x01" * 64)
        ],
        "/petlab.knn.v1.KnnService/ClassifyBatch": [
            knn_pb2.ClassifyBatchRequest(model="iris", key_id=key_id, encrypted_queries=[b"\x02" * 64] * 2)
        ],
        "/petlab.paillier.v1.PaillierKnnService/Distances": [
            paillier_pb2.DistancesRequest(
                model="iris",
                public_key_n=public.n.to_bytes(64, "big"),
                encrypted_levels=[cipher] * 4,
                encrypted_square_norm=cipher,
            )
        ],
        "/petlab.paillier.v1.PaillierKnnService/Labels": [
            paillier_pb2.LabelsRequest(model="iris", indices=[0, 1, 2])
        ],
        "/petlab.controller.v1.AnalysisController/OpenSession": [
            controller_pb2.OpenSessionRequest(
                first_trace=bytes.fromhex(other["traces"][0]),
                analyst_public_key=other["analyst_public_key"].encode(),
                analyst_signature=bytes.fromhex(other["analyst_signature"]),
            )
        ],
        "/petlab.controller.v1.AnalysisController/Next": [
            controller_pb2.NextRequest(
                session_id=session,
                trace=bytes.fromhex(document["traces"][1]),
                pointer=pointer,
                spec=document["specs"][pointer].encode(),
            )
        ],
        "/petlab.controller.v1.AnalysisController/Describe": [controller_pb2.DescribeRequest()],
        "/grpc.health.v1.Health/Check": [health_pb2.HealthCheckRequest(service="petlab.knn.v1.KnnService")],
        "/grpc.health.v1.Health/Watch": [health_pb2.HealthCheckRequest(service="")],
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="petlab.knn.v1.KnnService"),
        ],
    }
    return {path: [m.SerializeToString() for m in request] for path, request in messages.items()}


def _proto_modules() -> list:
    """Every generated ``*_pb2`` module of petlab's protos, and health checking's and reflection's."""
    names = [m.name for m in pkgutil.iter_modules(protos.__path__) if m.name.endswith("_pb2")]
    return [importlib.import_module(f"petlab.protos.{name}") for name in names] + [health_pb2, reflection_pb2]


def _methods() -> dict[str, MethodDescriptor]:
    """Every method of every service those modules describe, by its call path: a new RPC (or a
    new service in ``protos/``) is fuzzed without an edit here."""
    return {
        f"/{service.full_name}/{method.name}": method
        for module in _proto_modules()
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }


DESCRIPTORS = _methods()
METHODS = sorted(DESCRIPTORS)
CLIENT_STREAMS = {path for path, method in DESCRIPTORS.items() if method.client_streaming}
SERVER_STREAMS = {path for path, method in DESCRIPTORS.items() if method.server_streaming}


def _flip(data: bytes, bits: list[int]) -> bytes:
    out = bytearray(data)
    for bit in bits:
        out[(bit // 8) % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


def mutations(message: bytes) -> st.SearchStrategy[bytes]:
    """Random bytes, and the valid message bit-flipped, truncated or with bytes inserted."""
    choices = [st.binary(max_size=300)]
    if message:
        size = len(message)
        choices += [
            st.lists(st.integers(0, 8 * size - 1), min_size=1, max_size=6).map(
                lambda bits: _flip(message, bits)
            ),
            st.integers(0, size - 1).map(lambda n: message[:n]),
            st.tuples(st.integers(0, size), st.binary(min_size=1, max_size=24)).map(
                lambda cut: message[: cut[0]] + cut[1] + message[cut[0] :]
            ),
        ]
    return st.one_of(choices)


def call_raw(channel, path: str, requests: list[bytes]) -> grpc.StatusCode:
    """Send raw request bytes; the call's status (responses are read and dropped)."""
    try:
        if path in CLIENT_STREAMS and path in SERVER_STREAMS:
            for _ in channel.stream_stream(path)(iter(requests), timeout=TIMEOUT):
                pass
        elif path in CLIENT_STREAMS:
            channel.stream_unary(path)(iter(requests), timeout=TIMEOUT)
        elif path in SERVER_STREAMS:  # health Watch never ends: its first answer is enough
            responses = channel.unary_stream(path)(requests[0], timeout=TIMEOUT)
            next(responses)
            responses.cancel()
        else:
            channel.unary_unary(path)(requests[0], timeout=TIMEOUT)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def assert_serving(channel) -> None:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def third_party_unimplemented(path: str) -> set[grpc.StatusCode]:
    """UNIMPLEMENTED is a documented answer only for a method of another project's service that
    its servicer does not implement (grpc's HealthServicer 1.85 has no ``List``); never for
    petlab's own."""
    return set() if path.startswith("/petlab.") else {grpc.StatusCode.UNIMPLEMENTED}


def test_every_service_the_server_answers_is_fuzzed(channel):
    """The fuzzed methods come from the descriptors; the server's own reflection lists nothing else
    (and the method the hand-written list once missed is there)."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    (reply,) = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=TIMEOUT
    )
    served = {service.name for service in reply.list_services_response.service}
    fuzzed = {path.split("/")[1] for path in METHODS}
    assert served <= fuzzed and len(served) >= 5
    assert "/petlab.controller.v1.AnalysisController/Describe" in METHODS


@pytest.mark.parametrize("path", METHODS)
def test_every_answer_is_a_documented_status(channel, valid, path):
    base = valid.get(path) or [b""]  # a method without a curated request: its empty message
    allowed = DOCUMENTED | third_party_unimplemented(path)
    assert call_raw(channel, path, base) in allowed  # the valid request itself

    @FUZZ
    @given(st.data())
    def fuzz(data):
        count = data.draw(st.integers(1, 3)) if path in CLIENT_STREAMS else 1
        requests = [data.draw(mutations(base[i % len(base)])) for i in range(count)]
        status = call_raw(channel, path, requests)
        assert status in allowed, f"{path} answered {status.name} to {requests!r}"

    fuzz()
    assert_serving(channel)


def test_undecodable_request_is_invalid_argument(channel):
    """A string field that is not UTF-8 is INVALID_ARGUMENT, not gRPC's INTERNAL "Exception
    deserializing request!"."""
    not_utf8 = b"\x0a\x02\xff\xfe"  # field 1 (model), length 2, invalid UTF-8
    for path in ("/petlab.knn.v1.KnnService/GetClientSpecs", "/grpc.health.v1.Health/Check"):
        assert call_raw(channel, path, [not_utf8]) == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        call_raw(channel, "/petlab.knn.v1.KnnService/RegisterKeys", [not_utf8])
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert_serving(channel)


def test_a_public_key_of_an_unknown_algorithm_is_invalid_argument(channel):
    """A PEM whose algorithm identifier cryptography does not know (one bit flipped in an Ed25519
    key) raises UnsupportedAlgorithm, not ValueError: it must be INVALID_ARGUMENT, not UNKNOWN."""
    pem = (
        b"-----BEGIN PUBLIC KEY-----\nMCowBQYDk2VwAyEA/u2LDHM+qngFcHRFISGBPjpqDrnVv1bxXXzxnFJR6pI=\n"
        b"-----END PUBLIC KEY-----\n"
    )
    request = controller_pb2.OpenSessionRequest(first_trace=b"\x01" * 64, analyst_public_key=pem)
    path = "/petlab.controller.v1.AnalysisController/OpenSession"
    assert call_raw(channel, path, [request.SerializeToString()]) == grpc.StatusCode.INVALID_ARGUMENT
    assert_serving(channel)


@pytest.fixture(scope="module")
def token_server(serve, hosted_model, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fuzz-tokens")
    tokens = directory / "tokens"
    tokens.write_text("alice alice-token-0123456789abcdef\n")
    tokens.chmod(0o600)
    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    with serve(directory / "data", hosted, tokens=tokens) as server:
        yield server


@FUZZ
@given(value=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80))
def test_fuzzed_authorization_is_unauthenticated(token_server, value):
    """Any authorization value but the token itself: UNAUTHENTICATED, never another status."""
    with make_channel(f"127.0.0.1:{token_server.port}") as channel:
        call = channel.unary_unary("/petlab.knn.v1.KnnService/ListModels")
        with pytest.raises(grpc.RpcError) as failure:
            call(b"", timeout=TIMEOUT, metadata=[("authorization", value)])
        assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
