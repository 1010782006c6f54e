"""A device user's mistakes end in one line that names the bad value or file and the way out, and
what can be checked without the server is checked before any call: ``--features`` values, the
``--csv`` file, the address (a host alone is the default port), no server listening; a damaged
cache is rebuilt."""

from __future__ import annotations

import socket
import stat

import pytest

from petlab.addresses import with_default_port
from petlab.client import channel as client_channel
from petlab.client import main as client_main
from petlab.client.knn_client import cached_key_id


def _subcommand_help(name: str) -> str:
    parser = client_main.build_parser()
    return parser._subparsers._group_actions[0].choices[name].format_help()  # type: ignore[union-attr]


def _no_network(monkeypatch) -> None:
    def refused(*args, **kwargs):
        raise AssertionError("a channel was opened before the input was checked")

    monkeypatch.setattr(client_channel, "make_channel", refused)


@pytest.mark.parametrize(
    ("features", "named"),
    [("5.1,abc,1.4,0.2", "value 2, 'abc'"), ("5.1,3.5,,0.2", "value 3, ''"), ("nan,1,2,3", "value 1, 'nan'")],
)
def test_bad_features_are_named_before_any_call(features, named, monkeypatch, capsys):
    _no_network(monkeypatch)
    status = client_main.main(["classify", "--model", "iris", "--features", features])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("petlab-client: error: --features: ") and named in err
    assert "5.1,3.5,1.4,0.2" in err  # the way out: what a record looks like


def test_a_missing_csv_is_named_before_any_call(tmp_path, monkeypatch, capsys):
    _no_network(monkeypatch)
    missing = tmp_path / "rows.csv"
    assert client_main.main(["paillier-classify", "--model", "iris", "--csv", str(missing)]) == 2
    assert capsys.readouterr().err == f"petlab-client: error: {missing}: No such file or directory\n"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nobody listens there


@pytest.mark.parametrize("program", ["petlab-client", "petlab-analyst"])
def test_no_server_says_where_and_what_to_do(program, capsys):
    from petlab.client import analyst

    address = f"127.0.0.1:{_closed_port()}"
    if program == "petlab-client":
        status = client_main.main(["models", "--server", address, "--timeout", "10"])
    else:
        status = analyst.main(["describe", "--server", address, "--timeout", "10"])
    err = capsys.readouterr().err
    assert status == 1, err
    assert err.startswith(f"{program}: error: UNAVAILABLE: no server answered at {address}: ")
    assert "start one with `petlab-server serve`" in err and "--server HOST:PORT" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("localhost", "localhost:50051"),
        ("127.0.0.1", "127.0.0.1:50051"),
        ("knn.example.org", "knn.example.org:50051"),
        ("::1", "[::1]:50051"),
        ("[::1]", "[::1]:50051"),
        ("localhost:7000", "localhost:7000"),
        ("[::1]:7000", "[::1]:7000"),
        ("unix:/run/petlab.sock", "unix:/run/petlab.sock"),
        ("dns:///knn.example.org:7000", "dns:///knn.example.org:7000"),
        ("ipv4:127.0.0.1:7000", "ipv4:127.0.0.1:7000"),
    ],
)
def test_a_host_without_a_port_means_the_default_port(given, meant):
    assert with_default_port(given) == meant


def test_the_programs_take_a_host_alone_as_the_default_port():
    from petlab.client import analyst

    args = client_main.build_parser().parse_args(["models", "--server", "localhost"])
    assert args.server == "localhost:50051"
    args = analyst.build_parser().parse_args(["describe", "--server", "localhost"])
    assert args.server == "localhost:50051"


def test_a_damaged_key_id_is_dropped_and_named(tmp_path):
    said: list[str] = []
    path = tmp_path / "key_id"
    assert cached_key_id(path, said.append) == "" and not said  # none cached: nothing to say
    path.write_text("5e" * 16 + "\n")
    assert cached_key_id(path, said.append) == "5e" * 16 and not said
    for garbage in ("garbage", "5E" * 16, "5e" * 17, "\x00" * 32):
        path.write_text(garbage)
        assert cached_key_id(path, said.append) == ""
        assert not path.exists() and said.pop() == (
            f"the cached key id in {path} is not a key id; uploading the evaluation keys again"
        )


# two 1024-bit primes (a test vector, made once by phe): a 2048-bit key pair without the seconds
# that finding primes takes
P = int(
    "bf9d2b4b3ff2729c7366ac3cd096cb29bfeb993e1d99876b2d60f04f0126c5950005f7cc8fe292233521f89dd23c5977"
    "2e556c38dc85169fcc968cd0136444833e0c3c6efd86c6f72d9959ddd466ce92116cd4b3729ed35ee8e6c25ecb3037d2"
    "c6e6016664e2d23f99b0c5fcfc3a8875d01f53e5bff5cb6ba024e4a50292c555",
    16,
)
Q = int(
    "e90da5376e6c46a38c3b8fe2d23fc8d3036adc00017555f58e537fcbf58ce11d3c475855eb67c13608439a6840b971b0"
    "d6af22c3a7ca90eab0f5f36e943d6060792dd23acd322610b14b0b890349f6e00740b0e3a54878dca59ec96e11b61138"
    "c7013ab28e047fbdbca0ec1f50303e5d134d57430855ca93552d18bd4acc2da9",
    16,
)


def test_the_paillier_key_pair_is_cached_and_a_damaged_one_remade(tmp_path, monkeypatch):
    from phe import paillier

    from petlab.client import paillier_client

    public = paillier.PaillierPublicKey(P * Q)
    private = paillier.PaillierPrivateKey(public, P, Q)
    made = []
    monkeypatch.setattr(paillier_client, "generate_keypair", lambda: made.append(1) or (public, private))
    said: list[str] = []
    assert paillier_client.cached_keypair(tmp_path, said.append)[0] == (public, private)
    path = tmp_path / paillier_client.KEYPAIR_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and made == [1] and not said
    (public_again, private_again), seconds = paillier_client.cached_keypair(tmp_path, said.append)
    assert seconds == 0.0 and made == [1] and not said  # read, not made
    assert (public_again.n, private_again.p, private_again.q) == (P * Q, min(P, Q), max(P, Q))
    for damaged in ('{"p": 3, "q": 5}', "not json", '{"p": 4}', f'{{"p": {P}, "q": {P}}}'):
        path.write_text(damaged)
        path.chmod(0o600)
        assert paillier_client.cached_keypair(tmp_path, said.append)[0] == (public, private)
        assert said.pop() == f"the cached Paillier key pair in {path} is unreadable; making a new one"
    assert len(made) == 5


def test_classify_and_its_baseline_take_the_same_flags():
    def flags(name: str) -> set[str]:
        parser = client_main.build_parser()._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
        return {option for action in parser._actions for option in action.option_strings}

    assert flags("classify") == flags("paillier-classify")
    assert "HE-kNN-V" not in _subcommand_help("classify")
    assert "HE-kNN-V" not in client_main.build_parser().format_help()


@pytest.mark.parametrize(
    ("details", "told"),
    [
        ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused",
         "no server answered at knn.example.org:50051: start one with `petlab-server serve`"),
        ("DNS resolution failed for knn.example.org:50051: UNAVAILABLE",
         "no server answered at knn.example.org:50051"),
        ("failed to connect to all addresses; last error: UNKNOWN: Ssl handshake failed",
         "no TLS connection with knn.example.org:50051: check --tls-ca"),
        ("Socket closed", "the server at knn.example.org:50051 is unavailable; try again"),
    ],
)  # fmt: skip
def test_unavailable_says_what_went_wrong_and_keeps_grpcs_words(details, told):
    import grpc

    class Rpc(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            return details

    error = client_channel.unavailable(Rpc(), "knn.example.org")
    assert error is not None and str(error).startswith(f"UNAVAILABLE: {told}")
    assert str(error).endswith(f"(gRPC: {details})")
    assert client_channel.unavailable(ValueError("x"), "h") is None


def test_a_missing_certificate_is_named_by_both_clients(tmp_path, capsys):
    from petlab.client import analyst

    missing = tmp_path / "ca.pem"
    told = f"error: {missing}: No such file or directory; --tls-ca names a PEM file\n"
    assert client_main.main(["models", "--tls-ca", str(missing)]) == 2
    assert capsys.readouterr().err == f"petlab-client: {told}"
    assert analyst.main(["describe", "--tls-ca", str(missing)]) == 2
    assert capsys.readouterr().err == f"petlab-analyst: {told}"
