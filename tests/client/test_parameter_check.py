"""The client refuses encryption parameters weaker than concrete's 128-bit defaults."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from concrete import fhe

from petlab.client.main import main as client_main
from petlab.client.parameter_check import (
    TOLERANCE_BITS,
    WeakParameters,
    check_security,
    minimal_log2_variance,
)
from petlab.crypto.knn.deployment import client_specs_bytes
from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.knn.wire_format import SCHEMA


@pytest.fixture(scope="module")
def hosted(hosted_model):
    return hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))


@pytest.fixture(scope="module")
def specs(hosted) -> dict:
    return json.loads(client_specs_bytes(hosted.server))


def encoded(document: dict) -> bytes:
    return json.dumps(document).encode()


def test_a_genuine_server_passes_and_sits_on_the_curve(hosted):
    """The real model's specs pass, and concrete's own keys sit exactly on the curve used: the
    check is as strict as concrete's defaults, not laxer."""
    genuine = client_specs_bytes(hosted.server)
    check_security(genuine)
    keyset = fhe.ClientSpecs.deserialize(genuine).program_info.get_keyset_info()
    dimensions = [key.dimension() for key in keyset.secret_keys()]
    gaps = [
        math.log2(key.variance()) - minimal_log2_variance(dimensions[key.output_secret_key_id()])
        for key in [*keyset.bootstrap_keys(), *keyset.keyswitch_keys()]
    ]
    assert min(gaps) > -TOLERANCE_BITS and min(abs(gap) for gap in gaps) < TOLERANCE_BITS


def test_tiny_dimension_is_refused(specs):
    hostile = copy.deepcopy(specs)
    key = hostile["keyset"]["lweSecretKeys"][1]
    key["params"]["lweDimension"] = 256
    with pytest.raises(WeakParameters, match="LWE dimension 256"):
        check_security(encoded(hostile))


def test_smaller_dimension_with_the_same_noise_is_refused(specs):
    """Just above the minimum dimension but keeping the noise meant for a larger key: weaker."""
    hostile = copy.deepcopy(specs)
    for key in hostile["keyset"]["lweSecretKeys"]:
        if 450 < key["params"]["lweDimension"] < 1500:
            key["params"]["lweDimension"] = 500
    with pytest.raises(WeakParameters, match="noise variance"):
        check_security(encoded(hostile))


def test_almost_no_noise_is_refused(specs):
    hostile = copy.deepcopy(specs)
    hostile["keyset"]["lweKeyswitchKeys"][0]["params"]["variance"] = 1e-40
    with pytest.raises(WeakParameters, match="key-switching key 0 has noise variance"):
        check_security(encoded(hostile))


def test_garbage_specs_are_refused():
    with pytest.raises(WeakParameters, match="cannot be read"):
        check_security(b"{not specs")


def test_client_refuses_a_weak_server_before_making_keys(serve, hosted, specs, tmp_path, capsys):
    """Attack through the CLI: a server hands out specs with a tiny dimension (and their correct
    digest). petlab-client exits 2 with one line and writes no key."""
    hostile = copy.deepcopy(specs)
    hostile["keyset"]["lweSecretKeys"][1]["params"]["lweDimension"] = 256
    weak = copy.copy(hosted)
    weak.specs = encoded(hostile)
    weak.specs_sha256 = hashlib.sha256(weak.specs).hexdigest()
    cache = tmp_path / "client"
    with serve(tmp_path / "data", {"iris": weak}) as running:
        status = client_main(
            [
                "classify",
                "--server",
                f"127.0.0.1:{running.port}",
                "--model",
                "iris",
                "--features",
                "5.1,3.5,1.4,0.2",
                "--cache-dir",
                str(cache),
                "--quiet",
            ]
        )
    err = capsys.readouterr().err.strip()
    assert status == 2 and "LWE dimension 256" in err and len(err.splitlines()) == 1
    assert not list(cache.rglob("keys.bin"))


def _packing_key(specs: dict, variance: float) -> dict:
    """A packing key-switching key from the small secret key to the GLWE key the bootstrap key
    outputs (2 x 1024), as concrete describes one."""
    bootstrap = specs["keyset"]["lweBootstrapKeys"][0]
    secret = {key["id"]: key["params"]["lweDimension"] for key in specs["keyset"]["lweSecretKeys"]}
    params = bootstrap["params"]
    return {
        "id": 0,
        "inputId": bootstrap["inputId"],
        "outputId": bootstrap["outputId"],
        "params": {
            "levelCount": 1,
            "baseLog": 20,
            "glweDimension": params["glweDimension"],
            "polynomialSize": params["polynomialSize"],
            "inputLweDimension": secret[bootstrap["inputId"]],
            "innerLweDimension": secret[bootstrap["outputId"]],
            "variance": variance,
            "integerPrecision": 64,
            "modulus": {"modulus": {"native": {}}},
            "keyType": "binary",
        },
        "compression": "none",
    }


def _set(path: str, value):
    """A tampering: set the field at ``path`` (keys and list indices separated by dots)."""

    def tamper(document: dict) -> None:
        *parents, last = path.split(".")
        node = document
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return tamper


def _add_packing_key(variance: float):
    def tamper(document: dict) -> None:
        document["keyset"]["packingKeyswitchKeys"] = [_packing_key(document, variance)]

    return tamper


INPUT_ENCRYPTION = "circuits.0.inputs.0.typeInfo.lweCiphertext.encryption"
OUTPUT_ENCRYPTION = "circuits.0.outputs.0.typeInfo.lweCiphertext.encryption"


def _input_under_key_bits(bits: int):
    """The query encrypted with only the first ``bits`` coefficients of the secret key: the
    gate's LWE dimension lowered (no compression, so the mask travels in the clear), its shapes to
    match. Every field a check of the gate's fields alone would read is unchanged."""

    def tamper(document: dict) -> None:
        gate = document["circuits"][0]["inputs"][0]
        ciphertext = gate["typeInfo"]["lweCiphertext"]
        ciphertext["encryption"]["lweDimension"] = bits
        ciphertext["compression"] = "none"
        shape = [*ciphertext["abstractShape"]["dimensions"], bits + 1]
        ciphertext["concreteShape"]["dimensions"] = shape
        gate["rawInfo"]["shape"]["dimensions"] = shape

    return tamper


def _output_shaped_for(elements: int):
    """The answer's gate says it holds ``elements`` words (raw and concrete shape alike) while its
    key and LWE dimension stay genuine: concrete decrypts ``lweDimension + 1`` words from a value
    of that many (unchecked, the device dies by SIGABRT, or reads past its buffer)."""

    def tamper(document: dict) -> None:
        gate = document["circuits"][0]["outputs"][0]
        gate["typeInfo"]["lweCiphertext"]["concreteShape"]["dimensions"] = [elements]
        gate["rawInfo"]["shape"]["dimensions"] = [elements]

    return tamper


def _output_under_the_largest_key(document: dict) -> None:
    """The answer's gate names the largest secret key with that key's dimension (so every field
    the check read agrees) but keeps the genuine answer's shape: fewer words than it decrypts."""
    secrets = document["keyset"]["lweSecretKeys"]
    largest = max(secrets, key=lambda key: key["params"]["lweDimension"])
    encryption = document["circuits"][0]["outputs"][0]["typeInfo"]["lweCiphertext"]["encryption"]
    encryption["keyId"] = largest["id"]
    encryption["lweDimension"] = largest["params"]["lweDimension"]


def _two_functions_named_finish(document: dict) -> None:
    """A split model's specs (entry stage, answer stage) with a second function named like the
    answer stage, whose output is laid out otherwise: the client's result check and concrete's
    decryption would each pick one of the two."""
    whole = document["circuits"][0]
    decoy = copy.deepcopy(whole)
    decoy["outputs"] = copy.deepcopy(whole["inputs"])
    document["circuits"] = [
        {**copy.deepcopy(whole), "name": "partition_0"},
        {**copy.deepcopy(whole), "name": "finish"},
        {**decoy, "name": "finish"},
    ]


def _clear_input(document: dict) -> None:
    gate = document["circuits"][0]["inputs"][0]
    shape = gate["typeInfo"]["lweCiphertext"]["abstractShape"]
    gate["typeInfo"] = {"plaintext": {"shape": shape, "integerPrecision": 64, "isSigned": False}}
    gate["rawInfo"]["shape"] = shape


# one tampering per key kind and per field the check reads, with the words of its refusal
TAMPERINGS = {
    "secret key dimension": (_set("keyset.lweSecretKeys.1.params.lweDimension", 256), "LWE dimension 256"),
    "secret key distribution": (_set("keyset.lweSecretKeys.0.params.keyType", "ternary"), "not a binary key"),
    "bootstrap key noise": (
        _set("keyset.lweBootstrapKeys.0.params.variance", 1e-40),
        "bootstrap key 0 has noise variance",
    ),
    "bootstrap key dimensions": (
        _set("keyset.lweBootstrapKeys.0.params.polynomialSize", 512),
        "bootstrap key 0 does not match its secret keys",
    ),
    "key-switching key noise": (
        _set("keyset.lweKeyswitchKeys.0.params.variance", 1e-40),
        "key-switching key 0 has noise variance",
    ),
    "key-switching key dimensions": (
        _set("keyset.lweKeyswitchKeys.0.params.outputLweDimension", 2047),
        "key-switching key 0 does not match its secret keys",
    ),
    "key-switching key modulus": (
        _set("keyset.lweKeyswitchKeys.0.params.modulus", {"modulus": {"powerOfTwo": {"power": 32}}}),
        "not over the native 2^64 modulus",
    ),
    "input encryption noise": (
        _set(f"{INPUT_ENCRYPTION}.variance", 1e-40),
        "input 0 of knn has noise variance",
    ),
    "input encrypted under one key bit": (
        _input_under_key_bits(1),
        "input 0 of knn is encrypted with LWE dimension 1 under secret key 0",
    ),
    "output decrypted past the key": (
        _set(f"{OUTPUT_ENCRYPTION}.lweDimension", 4096),
        "output 0 of knn is encrypted with LWE dimension 4096",
    ),
    "output under an unknown key": (_set(f"{OUTPUT_ENCRYPTION}.keyId", 7), "under secret key 7"),
    "output shaped unlike its key": (_output_shaped_for(17), "output 0 of knn is laid out as [17]"),
    "output under the largest key, shaped for its own": (
        _output_under_the_largest_key,
        "output 0 of knn is laid out as",
    ),
    "two functions of one name": (_two_functions_named_finish, "name two functions 'finish'"),
    "clear input": (_clear_input, "cannot be read"),
    "added packing key-switching key": (
        _add_packing_key(1e-40),
        "packing key-switching key 0 has noise variance",
    ),
    "unknown key kind": (_set("keyset.lwePublicKeys", []), "lwePublicKeys, which this client does not check"),
    "unknown document field": (_set("serverKeys", {}), "serverKeys, which this client does not check"),
    "TFHE-rs interoperability": (
        _set("tfhers_specs.input_types_per_func.knn", [{"bit_width": 8}]),
        "TFHE-rs interoperability",
    ),
}


@pytest.mark.parametrize("name", TAMPERINGS)
def test_every_key_kind_is_checked(specs, name):
    tamper, words = TAMPERINGS[name]
    hostile = copy.deepcopy(specs)
    tamper(hostile)
    with pytest.raises(WeakParameters, match=re.escape(words)):
        check_security(encoded(hostile))


def test_a_query_under_one_key_bit_is_readable(specs):
    """Why the gates are checked: under specs whose input names LWE dimension 1, concrete encrypts
    each feature with the secret key's first coefficient only, and whoever receives the query reads
    it by trying both values of that bit (the check is bypassed here on purpose)."""
    hostile = copy.deepcopy(specs)
    _input_under_key_bits(1)(hostile)
    client = fhe.Client(fhe.ClientSpecs.deserialize(encoded(hostile)))
    client.keys.generate(secret_seed=5, encryption_seed=5)
    query = np.array([1, 5, 9, 14])
    with SCHEMA.Value.from_bytes(client.encrypt(query).serialize()) as value:
        words = np.frombuffer(b"".join(bytes(blob) for blob in value.payload.data), dtype="<u8")
    mask, body = [int(w) for w in words[0::2]], [int(w) for w in words[1::2]]
    width = hostile["circuits"][0]["inputs"][0]["typeInfo"]["lweCiphertext"]["encoding"]["integer"]["width"]
    shift = 64 - width - 1  # concrete's encoding: one padding bit above the message
    readings = [
        [((b - a * bit) % 2**64 + (1 << (shift - 1))) >> shift for a, b in zip(mask, body, strict=True)]
        for bit in (0, 1)
    ]
    assert query.tolist() in readings


def test_a_packing_key_on_the_curve_passes(specs):
    """Packing key-switching keys are checked like the others, not refused as a kind: one with the
    least noise concrete allows under its GLWE key (2 x 1024) passes, one bit less does not."""
    glwe = specs["keyset"]["lweBootstrapKeys"][0]["params"]
    floor = 2.0 ** minimal_log2_variance(glwe["glweDimension"] * glwe["polynomialSize"])
    on_curve = copy.deepcopy(specs)
    _add_packing_key(floor)(on_curve)
    check_security(encoded(on_curve))
    _add_packing_key(floor / 2)(on_curve)
    with pytest.raises(WeakParameters, match="packing key-switching key 0 has noise variance"):
        check_security(encoded(on_curve))


@pytest.mark.parametrize("name", TAMPERINGS)
def test_client_refuses_tampered_specs_of_each_kind(serve, hosted, specs, tmp_path, capsys, name):
    """Through the CLI against a server handing out the tampered specs (with their correct digest):
    exit 2, one line naming the problem, no key written."""
    tamper, words = TAMPERINGS[name]
    hostile = copy.deepcopy(specs)
    tamper(hostile)
    weak = copy.copy(hosted)
    weak.specs = encoded(hostile)
    weak.specs_sha256 = hashlib.sha256(weak.specs).hexdigest()
    cache = tmp_path / "client"
    with serve(tmp_path / "data", {"iris": weak}) as running:
        address = f"127.0.0.1:{running.port}"
        features = ["--features", "5.1,3.5,1.4,0.2", "--cache-dir", str(cache), "--quiet"]
        status = client_main(["classify", "--server", address, "--model", "iris", *features])
    err = capsys.readouterr().err.strip()
    assert status == 2 and words in err and len(err.splitlines()) == 1, err
    assert not list(cache.rglob("keys.bin"))


DECRYPT_AS_THE_GATE_SAYS = """
import json, sys
from petlab.crypto.knn.deployment import KnnClient
from petlab.crypto.knn.wire_format import SCHEMA
specs = open(sys.argv[1], "rb").read()
gate = json.loads(specs)["circuits"][0]["outputs"][0]
client = KnnClient(specs)  # the parameter check bypassed on purpose
client.generate_keys(secret_seed=5, encryption_seed=5)
words = 1
for size in gate["rawInfo"]["shape"]["dimensions"]:
    words *= size
answer = SCHEMA.Value.new_message(
    payload={"data": [bytes(8 * words)]}, rawInfo=gate["rawInfo"], typeInfo=gate["typeInfo"]
).to_bytes()
print("decrypted", client.decrypt_class(bytes(answer)))
"""


MISSHAPEN_ANSWERS = ["output shaped unlike its key", "output under the largest key, shaped for its own"]


@pytest.mark.parametrize("name", MISSHAPEN_ANSWERS)
def test_an_answer_laid_out_unlike_its_key_kills_the_device(specs, tmp_path, name):
    """Why the layout is checked: under such specs, a hostile server's answer made to fit the gate
    exactly passes the device's result check (``wire_format``), and concrete's decryption, which
    reads ``lweDimension + 1`` words whatever the gate says, reads past the answer's buffer: the
    process holding the secret key dies (SIGABRT in concrete 2.11)."""
    tamper, _ = TAMPERINGS[name]
    hostile = copy.deepcopy(specs)
    tamper(hostile)
    path = tmp_path / "specs.json"
    path.write_bytes(encoded(hostile))
    run = subprocess.run(
        [sys.executable, "-c", DECRYPT_AS_THE_GATE_SAYS, str(path)], capture_output=True, timeout=300
    )
    assert run.returncode < 0 and b"decrypted" not in run.stdout, (run.returncode, run.stderr[-500:])
