"""The device and the analyst against a hostile server.

A fake server in this process serves a real model's client specs (Wine, n = 6: keys made once per
session by ``keyed_model`` and put in the device's key cache, so nothing is generated here) and
evaluates the device's query with the real circuit, but describes the model as it likes: names
carrying terminal controls (an OSC 52 clipboard write, a screen clear, a bidi override, C1 and DEL),
or fewer classes than the circuit answers. Found before: the names reached the terminal intact, and
an answer beyond the described classes ended ``petlab-client`` in an ``IndexError`` traceback.
"""

from __future__ import annotations

import hashlib
import io
import unicodedata
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import numpy as np
import pytest

from petlab.client import analyst
from petlab.client import main as client_main
from petlab.client.knn_client import _safe
from petlab.crypto.chain.certification import DOCUMENT_VERSION
from petlab.crypto.knn.deployment import parse_ciphertext, parse_evaluation_keys, run_encrypted
from petlab.crypto.knn.model import KnnSettings
from petlab.owner_only import private_directory, write_owner_only
from petlab.protos import controller_pb2, controller_pb2_grpc, knn_pb2, knn_pb2_grpc
from petlab.server.knn.datasets import load_bundled
from petlab.terminal_text import shown

HOSTILE = [
    "\x1b]52;c;cHduZWQ=\x07",  # OSC 52: write the clipboard
    "\x1b[2J\x1b[Hclear",  # clear the screen, cursor home
    "\u202egpj.exe",  # right-to-left override
    "c1\x9b31mred",  # C1 CSI
    "del\x7fete\u200b\u2066iso\u2069\u2028line\x00nul",
]
SETTINGS = KnnSettings(n=6, k=3)
KEY_ID = "5e" * 16  # what RegisterKeys returns: 32 lowercase hex digits


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` that could steer a terminal (line breaks between lines aside)."""
    return [c for c in text.replace("\n", "") if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


@pytest.mark.parametrize("text", HOSTILE)
def test_shown_escapes_every_control(text):
    out = shown(text)
    assert not unsafe(out) and "\n" not in out
    assert out.encode("ascii", "backslashreplace")  # printable escapes, e.g. \x1b, \u202e
    assert shown("Iris-virginica, Ωμέγα, 東京") == "Iris-virginica, Ωμέγα, 東京"  # scripts pass
    assert shown("x" * 5000).endswith("[904 more characters]")


class HostileKnn(knn_pb2_grpc.KnnServiceServicer):
    """A real circuit behind a lying description (module docstring)."""

    def __init__(self, hosted, client, class_names: list[str], answers: dict[str, bytes]):
        self.hosted, self.client, self.answers = hosted, client, answers
        info = hosted.info()
        del info.class_names[:]
        info.class_names.extend(class_names)
        del info.feature_names[:]
        info.feature_names.extend(HOSTILE[i % len(HOSTILE)] + str(i) for i in range(info.d))
        self.info = info
        self.listed = knn_pb2.ModelInfo()
        self.listed.CopyFrom(info)
        self.listed.algorithm += HOSTILE[2]  # the specs' algorithm is checked: only listed

    def ListModels(self, request, context):
        return knn_pb2.ListModelsResponse(models=[self.listed])

    def GetClientSpecs(self, request, context):
        specs = self.hosted.specs
        return knn_pb2.GetClientSpecsResponse(
            model=self.info, client_specs=specs, specs_sha256=hashlib.sha256(specs).hexdigest()
        )

    def Classify(self, request, context):
        if not self.answers:  # one real evaluation; a hostile server may answer any query with it
            keys = parse_evaluation_keys(self.client.evaluation_keys_bytes())
            query = parse_ciphertext(request.encrypted_query)
            self.answers["class"] = run_encrypted(self.hosted.server, keys, query)
        return knn_pb2.ClassifyResponse(encrypted_class=self.answers["class"])


@contextmanager
def fake_server(*servicers) -> Iterator[str]:
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    for servicer in servicers:
        if isinstance(servicer, knn_pb2_grpc.KnnServiceServicer):
            knn_pb2_grpc.add_KnnServiceServicer_to_server(servicer, server)
        else:
            controller_pb2_grpc.add_AnalysisControllerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0).wait(10)


def cache_keys(cache: Path, address: str, hosted, client) -> None:
    """The device's key cache as ``KnnRemote.prepare`` leaves it: keys made, key id registered."""
    digest = hashlib.sha256(hosted.specs).hexdigest()
    directory = cache
    for part in (_safe(address), "wine", digest[:16]):
        private_directory(directory)
        directory = directory / part
    private_directory(directory)
    write_owner_only(directory / "keys.bin", client.secret_keys_bytes())
    write_owner_only(directory / "key_id", KEY_ID.encode())


@pytest.fixture(scope="module")
def wine(keyed_model):
    hosted, client = keyed_model("wine", SETTINGS)
    _, test = load_bundled("wine").split()
    row = test.features[int(np.flatnonzero(test.labels == 2)[0])]  # a row of the last class
    return hosted, client, ",".join(f"{v:g}" for v in row), {}  # the answer, evaluated once


def classify(address: str, cache: Path, features: str) -> int:
    argv = ["classify", "--server", address, "--model", "wine", "--features", features, "--quiet"]
    return client_main.main([*argv, "--cache-dir", str(cache), "--timeout", "120"])


@pytest.mark.slow
def test_the_device_prints_no_control_character_of_the_server(wine, tmp_path, capsys):
    hosted, client, features, answers = wine
    servicer = HostileKnn(hosted, client, HOSTILE[:3], answers)
    with fake_server(servicer) as address:
        assert client_main.main(["models", "--server", address]) == 0
        cache_keys(tmp_path, address, hosted, client)
        assert classify(address, tmp_path, features) == 0
    out, err = capsys.readouterr()
    assert not unsafe(out) and not unsafe(err), f"controls reached the terminal: {out!r} {err!r}"
    assert "\\x1b]52;c;cHduZWQ=\\x07" in out and "\\u202e" in out  # shown, escaped
    assert out.strip().splitlines()[-1] in {shown(name) for name in HOSTILE[:3]}


class FailingKnn(knn_pb2_grpc.KnnServiceServicer):
    def ListModels(self, request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, HOSTILE[0] + HOSTILE[4])


def test_error_details_from_the_server_are_sanitized(capsys):
    with fake_server(FailingKnn()) as address:
        assert client_main.main(["models", "--server", address]) == 3  # a refusal (exit statuses)
    err = capsys.readouterr().err
    assert "FAILED_PRECONDITION" in err and not unsafe(err), err


@pytest.mark.slow
def test_a_class_beyond_the_described_ones_is_refused(wine, tmp_path, capsys):
    """The circuit answers class 2; the server describes one class: refused, exit status 1."""
    hosted, client, features, answers = wine
    with fake_server(HostileKnn(hosted, client, ["only"], answers)) as address:
        cache_keys(tmp_path, address, hosted, client)
        status = classify(address, tmp_path, features)
    out, err = capsys.readouterr()
    assert status == 1, err
    assert "refusing the server's answer" in err and "1 classes" in err
    assert "Traceback" not in err and "IndexError" not in err and out == ""


class RegisteringKnn(HostileKnn):
    """Takes the device's evaluation keys (``RegisterKeys``) and records the key id each query
    comes with, then stops the device there (no evaluation: its cost is not what is tested)."""

    def RegisterKeys(self, request_iterator, context):
        size = sum(len(chunk.data) for chunk in request_iterator)
        self.registered = f"{size:032x}"
        return knn_pb2.RegisterKeysResponse(key_id=self.registered)

    def Classify(self, request, context):
        self.queried_with = request.key_id
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the test stops here")


@pytest.mark.slow
def test_a_damaged_cached_key_id_is_replaced_by_uploading_the_keys_again(wine, tmp_path, capsys):
    """A key id overwritten with garbage: the device says which file, uploads its keys again,
    caches the new id and queries with it (it never sends the garbage, failing on every run)."""
    hosted, client, features, answers = wine
    servicer = RegisteringKnn(hosted, client, ["class_0", "class_1", "class_2"], answers)
    with fake_server(servicer) as address:
        cache_keys(tmp_path, address, hosted, client)
        (id_file,) = tmp_path.rglob("key_id")
        id_file.write_text("not a key id\n")
        argv = ["classify", "--server", address, "--model", "wine", "--features", features]
        status = client_main.main([*argv, "--cache-dir", str(tmp_path), "--timeout", "120"])
    err = capsys.readouterr().err
    assert f"the cached key id in {id_file} is not a key id" in err
    assert servicer.queried_with == servicer.registered == id_file.read_text()
    assert status == 3 and "the test stops here" in err  # the fake server's refusal, as told


class HostileController(controller_pb2_grpc.AnalysisControllerServicer):
    def Describe(self, request, context):
        return controller_pb2.ControllerDescription(controller_id=HOSTILE[4] + HOSTILE[0])

    def OpenSession(self, request, context):
        return controller_pb2.OpenSessionResponse(session_id="s")

    def Next(self, request, context):
        if request.trace == bytes(64):
            return controller_pb2.NextResponse(position=1, result_json='{"n": 1}' + HOSTILE[1])
        return controller_pb2.NextResponse(position=2, abort_reason=HOSTILE[3] + HOSTILE[2])


def test_the_analyst_prints_no_control_character_of_the_controller(capsys):
    document = {
        "version": DOCUMENT_VERSION,
        "traces": [bytes(64).hex(), bytes(64).hex(), bytes([1] * 64).hex()],
        "pointers": ["p", "p"],
        "specs": {"p": "{}"},
        "analyst_public_key": "key",
        "analyst_signature": "",
        "authority_signature": "",
    }
    out = io.StringIO()
    with fake_server(HostileController()) as address:
        with grpc.insecure_channel(address) as channel:
            assert analyst.run(document, channel, timeout=10, out=out) == 3
        assert analyst.main(["describe", "--server", address]) == 0
    printed = out.getvalue() + capsys.readouterr().out
    assert not unsafe(printed), printed
    assert "ABORTED" in printed and "\\x9b" in printed and "\\u202e" in printed
