"""The client refuses encryption parameters weaker than concrete's 128-bit defaults (issue 15)."""

from __future__ import annotations

import copy
import hashlib
import json
import math

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
