"""The client's bearer token travels as gRPC's own call credentials: composed with TLS, or with
gRPC's local credentials to a loopback server, never on a plaintext channel unless asked for
(``client/channel.py``). A bare health server records the ``authorization`` header it receives."""

from __future__ import annotations

import datetime
from concurrent import futures

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from petlab.client.channel import MalformedToken, make_channel

TOKEN = "alice-token-0123456789"


class _Recorder(grpc.ServerInterceptor):
    def __init__(self) -> None:
        self.headers: list[str | None] = []

    def intercept_service(self, continuation, handler_call_details):
        self.headers.append(dict(handler_call_details.invocation_metadata).get("authorization"))
        return continuation(handler_call_details)


@pytest.fixture()
def health_server():
    """``(recorder, start)``: ``start(credentials)`` serves health on localhost, returns the port."""
    recorder = _Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=[recorder])
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)

    def start(credentials: grpc.ServerCredentials | None) -> int:
        if credentials is None:
            port = server.add_insecure_port("127.0.0.1:0")
        else:
            port = server.add_secure_port("localhost:0", credentials)
        server.start()
        return port

    yield recorder, start
    server.stop(0).wait(5)


def _check(channel: grpc.Channel) -> None:
    with channel:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)


def test_token_over_tls_is_a_call_credential(health_server, tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "ca.pem").write_bytes(cert_pem)
    recorder, start = health_server
    port = start(grpc.ssl_server_credentials([(key_pem, cert_pem)]))
    _check(make_channel(f"localhost:{port}", tls_ca=tmp_path / "ca.pem", token=TOKEN))
    assert recorder.headers == [f"Bearer {TOKEN}"]


def test_token_to_loopback_goes_over_local_credentials_not_a_plaintext_channel(health_server, monkeypatch):
    """Reverting to an interceptor on ``grpc.insecure_channel`` fails here: that constructor refuses."""
    recorder, start = health_server
    port = start(None)

    def refuse(*args, **kwargs):
        raise AssertionError("a token went over a plaintext channel")

    monkeypatch.setattr(grpc, "insecure_channel", refuse)
    _check(make_channel(f"127.0.0.1:{port}", token=TOKEN))
    assert recorder.headers == [f"Bearer {TOKEN}"]


def test_no_token_no_header_and_malformed_tokens_refused(health_server):
    recorder, start = health_server
    port = start(None)
    _check(make_channel(f"127.0.0.1:{port}"))
    assert recorder.headers == [None]
    for bad in ("has space", "", "x" * 513, "caf\u00e9"):
        with pytest.raises(MalformedToken):
            make_channel(f"127.0.0.1:{port}", token=bad)
