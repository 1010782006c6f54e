"""Caller identities (bearer tokens, client certificates) and per-owner quotas through real gRPC
on loopback. Keys are planted in the server's store directly: these tests are
about who may use and evict what, not about key generation."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from pathlib import Path

import grpc
import pytest
from tls_certificates import certificate, write_pem

from petlab.addresses import is_loopback_address
from petlab.client.analyst import main as analyst_main
from petlab.client.channel import InsecureCredentials
from petlab.client.knn_client import make_channel
from petlab.client.main import main as client_main
from petlab.crypto.knn.model import KnnSettings
from petlab.protos import knn_pb2, knn_pb2_grpc, paillier_pb2, paillier_pb2_grpc
from petlab.server.common.admission import ServiceLimits
from petlab.server.common.callers import TokensFileError, load_tokens
from petlab.server.knn.service import key_tag

ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-fedcba9876543210"


@pytest.fixture(scope="module")
def hosted(hosted_model):
    return {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}


def tokens_file(directory: Path, text: str = f"alice {ALICE}\nbob {BOB}\n", mode: int = 0o600) -> Path:
    path = directory / "tokens"
    path.write_text(text)
    path.chmod(mode)
    return path


def plant_key(running, owner: str) -> str:
    """A key in the server's store as if ``owner`` had registered it (junk bytes: a use that
    passes the owner check fails later, at parsing, with another status)."""
    data = b"not really evaluation keys"
    stored = running.keys.put(
        key_tag(running.hosted["iris"]), owner, len(data), hashlib.sha256(data).hexdigest(), [data]
    )
    return stored.key_id


def classify(channel, key_id: str) -> grpc.RpcError:
    request = knn_pb2.ClassifyRequest(model="iris", key_id=key_id, encrypted_query=b"x")
    with pytest.raises(grpc.RpcError) as failure:
        knn_pb2_grpc.KnnServiceStub(channel).Classify(request, timeout=10)
    return failure.value


def list_models(channel) -> list[str]:
    reply = knn_pb2_grpc.KnnServiceStub(channel).ListModels(knn_pb2.ListModelsRequest(), timeout=10)
    return [m.name for m in reply.models]


def test_tokens_file_must_be_owner_only_and_well_formed(tmp_path):
    assert set(load_tokens(tokens_file(tmp_path)).values()) == {"alice", "bob"}
    with pytest.raises(TokensFileError, match="readable or writable by others"):
        load_tokens(tokens_file(tmp_path, mode=0o640))
    for text in (f"alice {ALICE} extra\n", "alice short\n", f"alice {ALICE}\nbob {ALICE}\n", "# none\n"):
        with pytest.raises(TokensFileError) as refused:
            load_tokens(tokens_file(tmp_path, text))
        assert ALICE not in str(refused.value)


def test_missing_or_wrong_token_is_unauthenticated(serve, hosted, tmp_path):
    with serve(tmp_path / "data", hosted, tokens=tokens_file(tmp_path)) as running:
        address = f"127.0.0.1:{running.port}"
        for token in (None, "wrong-token-0123456789", f"{ALICE}x"):
            with make_channel(address, token=token) as channel, pytest.raises(grpc.RpcError) as failure:
                list_models(channel)
            assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
            details = failure.value.details()
            assert "bearer token" in details and not any(s in details for s in (ALICE, BOB, "alice", "bob"))
        with make_channel(address, token=ALICE) as channel:
            assert list_models(channel) == ["iris"]


def test_an_owner_cannot_use_another_owners_keys(serve, hosted, tmp_path):
    """Attack: alice learns bob's key id. The server answers her exactly as for an unknown id;
    bob's own call passes the owner check (and fails later, on the planted junk)."""
    with serve(tmp_path / "data", hosted, tokens=tokens_file(tmp_path)) as running:
        bobs = plant_key(running, "token:bob")
        address = f"127.0.0.1:{running.port}"
        with make_channel(address, token=ALICE) as alice:
            refused = classify(alice, bobs)
            assert refused.code() == grpc.StatusCode.NOT_FOUND and "unknown or expired" in refused.details()
        assert bobs in {k.key_id for k in running.keys.entries()}
        with make_channel(address, token=BOB) as bob:
            assert classify(bob, bobs).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_one_owners_exhausted_quota_does_not_refuse_another(serve, hosted, tmp_path, silent_requests):
    """Alice holds her one upload slot with a stream that sends nothing and asks for more than her
    quota: she is refused (RESOURCE_EXHAUSTED). Bob still gets an upload slot and room: his junk
    upload reaches verification (INVALID_ARGUMENT), and his stored key stays."""
    limits = ServiceLimits(upload_slots=2, owner_upload_slots=1, first_chunk_seconds=5)

    def upload(stub, size: int, data: bytes = b"junk") -> grpc.RpcError:
        first = knn_pb2.KeyChunk(
            model="iris", total_size=size, sha256=hashlib.sha256(data).hexdigest(), data=data
        )
        with pytest.raises(grpc.RpcError) as failure:
            stub.RegisterKeys(iter([first]), timeout=10)
        return failure.value

    options = {"tokens": tokens_file(tmp_path), "limits": limits, "owner_cap_bytes": 1000}
    with serve(tmp_path / "data", hosted, **options) as running:
        bobs = plant_key(running, "token:bob")
        address = f"127.0.0.1:{running.port}"
        with make_channel(address, token=ALICE) as alice, make_channel(address, token=BOB) as bob:
            alice_stub, bob_stub = knn_pb2_grpc.KnnServiceStub(alice), knn_pb2_grpc.KnnServiceStub(bob)
            held = alice_stub.RegisterKeys.future(silent_requests(), timeout=15)
            time.sleep(0.5)  # alice's idle upload takes her one upload slot (and holds it)
            assert not held.done(), held.exception()
            second = upload(alice_stub, 4)
            assert (
                second.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "you already have" in second.details()
            )
            assert upload(bob_stub, 4).code() == grpc.StatusCode.INVALID_ARGUMENT
            silent_requests.release.set()
            with pytest.raises(grpc.RpcError):
                held.result(timeout=15)
            over = upload(alice_stub, 1001)
            assert over.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "your quota" in over.details()
        assert bobs in {k.key_id for k in running.keys.entries()}


def test_client_certificate_names_the_owner(serve, hosted, tmp_path):
    ca_key, ca = certificate("petlab test CA")
    _, ca_path = write_pem(tmp_path, "ca", ca_key, ca)
    server_key, server_cert = write_pem(tmp_path, "server", *certificate("localhost", ca_key, ca.subject))
    devices = {
        name: write_pem(tmp_path, name, *certificate(name, ca_key, ca.subject)) for name in ("dev-a", "dev-b")
    }
    tls = {"host": "localhost", "tls_cert": server_cert, "tls_key": server_key, "tls_client_ca": ca_path}
    with serve(tmp_path / "data", hosted, **tls) as running:
        b_key = plant_key(running, "cert:dev-b")
        address = f"localhost:{running.port}"
        with make_channel(address, ca_path, devices["dev-a"][1], devices["dev-a"][0]) as a:
            assert classify(a, b_key).code() == grpc.StatusCode.NOT_FOUND
        with make_channel(address, ca_path, devices["dev-b"][1], devices["dev-b"][0]) as b:
            assert classify(b, b_key).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_client_sends_its_token(serve, hosted, tmp_path, monkeypatch, capsys):
    with serve(tmp_path / "data", hosted, tokens=tokens_file(tmp_path)) as running:
        server = f"127.0.0.1:{running.port}"
        assert client_main(["models", "--server", server]) == 3  # UNAUTHENTICATED: refused
        assert "UNAUTHENTICATED" in capsys.readouterr().err
        monkeypatch.setenv("PETLAB_TOKEN", BOB)
        assert client_main(["models", "--server", server]) == 0
        assert capsys.readouterr().out.startswith("iris:")
        assert client_main(["models", "--server", server, "--token", "bad token"]) == 2


def test_paillier_baseline_also_needs_a_token(serve, hosted, tmp_path):
    options = {"tokens": tokens_file(tmp_path), "enable_paillier_baseline": True}
    with serve(tmp_path / "data", hosted, **options) as running:
        request = paillier_pb2.LabelsRequest(model="iris", indices=[0])
        address = f"127.0.0.1:{running.port}"
        with make_channel(address) as anonymous, pytest.raises(grpc.RpcError) as failure:
            paillier_pb2_grpc.PaillierKnnServiceStub(anonymous).Labels(request, timeout=10)
        assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with make_channel(address, token=ALICE) as alice:
            assert paillier_pb2_grpc.PaillierKnnServiceStub(alice).Labels(request, timeout=10).labels


LOOPBACK = ["127.0.0.1:50051", "127.8.9.10:1", "localhost:50051", "[::1]:50051", "dns:///localhost:50051"]
LOOPBACK += [
    "ipv4:127.0.0.1:1,127.0.0.2:2",
    "unix:/tmp/petlab.sock",
    "unix-abstract:petlab",
    "[::ffff:127.0.0.1]:1",
]
NOT_LOOPBACK = ["192.0.2.7:50051", "example.org:50051", "dns:///example.org:443", "[2001:db8::1]:50051"]
NOT_LOOPBACK += ["ipv4:127.0.0.1:1,192.0.2.7:2", "10.0.0.1:50051", "vsock:3:50051", "localhost.example.org:1"]


@pytest.fixture()
def no_plaintext_channel(monkeypatch):
    """Fails the test if a plaintext channel is opened (so nothing is ever sent to an address that
    is not this machine's, even with the protection switched off)."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a plaintext channel was opened to {args[0]}")

    monkeypatch.setattr(grpc, "insecure_channel", refuse)


def test_loopback_addresses_are_told_apart():
    assert all(is_loopback_address(address) for address in LOOPBACK)
    assert not any(is_loopback_address(address) for address in NOT_LOOPBACK)


@pytest.mark.parametrize("address", NOT_LOOPBACK)
def test_a_token_never_travels_in_plaintext_beyond_loopback(
    address, no_plaintext_channel, monkeypatch, capsys
):
    """Attack: a user points petlab-client at a server without --tls-ca; its token (flag or
    environment) would cross the network readable. Refused before any channel opens: exit 2, one
    line saying how to fix it."""
    assert client_main(["models", "--server", address, "--token", ALICE]) == 2
    monkeypatch.setenv("PETLAB_TOKEN", ALICE)
    assert client_main(["models", "--server", address]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("--tls-ca" in line and "--insecure-token" in line for line in lines)
    with pytest.raises(InsecureCredentials):
        make_channel(address, token=ALICE)


def test_insecure_token_is_an_explicit_choice(monkeypatch):
    opened = []
    monkeypatch.setattr(grpc, "insecure_channel", lambda address, options: opened.append(address))
    make_channel(NOT_LOOPBACK[0], token=ALICE, insecure_token=True)
    assert opened == [NOT_LOOPBACK[0]]


def test_a_token_goes_to_a_loopback_server_in_plaintext(serve, hosted, tmp_path, capsys):
    with serve(tmp_path / "data", hosted, tokens=tokens_file(tmp_path)) as running:
        for host in ("127.0.0.1", "localhost"):
            assert client_main(["models", "--server", f"{host}:{running.port}", "--token", BOB]) == 0
    assert capsys.readouterr().out.count("iris:") == 2


@pytest.fixture()
def recording_proxy(monkeypatch):
    """An HTTP CONNECT proxy named by ``grpc_proxy``, ``https_proxy`` and ``http_proxy`` that
    accepts every tunnel and keeps what comes through it (the proxy host's view)."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(2)
                received = b""
                try:
                    received = connection.recv(65536)
                    connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    while chunk := connection.recv(65536):
                        received += chunk
                except OSError:
                    pass
                seen.append(received)

    threading.Thread(target=accept, daemon=True).start()
    for variable in ("grpc_proxy", "https_proxy", "http_proxy"):
        monkeypatch.setenv(variable, f"http://127.0.0.1:{listener.getsockname()[1]}")
    yield seen
    listener.close()


def test_a_token_to_loopback_never_goes_through_a_proxy(serve, hosted, tmp_path, recording_proxy, capsys):
    """Attack: with a proxy in the environment, as on many company machines, gRPC tunnels a
    "loopback" plaintext channel through it (``CONNECT 127.0.0.1:PORT``): the proxy would read the
    token and answer from its own loopback. The channel goes to this machine."""
    with serve(tmp_path / "data", hosted, tokens=tokens_file(tmp_path)) as running:
        status = client_main(["models", "--server", f"127.0.0.1:{running.port}", "--token", BOB])
    assert recording_proxy == []  # before: the whole HTTP/2 stream, token headers included
    assert status == 0 and "iris:" in capsys.readouterr().out


@pytest.mark.parametrize("given", ["--tls-key", "--tls-cert"])
def test_client_certificate_paths_never_fall_back_to_plaintext(given, tmp_path, no_plaintext_channel, capsys):
    """A client key without its certificate (or the reverse) is never dropped for a plaintext
    channel: both programs refuse with exit 2."""
    path = tmp_path / "credential.pem"
    path.write_text("not read")
    assert analyst_main(["describe", "--server", "127.0.0.1:1", given, str(path)]) == 2
    assert client_main(["models", "--server", "127.0.0.1:1", given, str(path)]) == 2
    assert capsys.readouterr().err.count("--tls-cert and --tls-key go together") == 2
