"""Byte-level API error handling and the on-disk compile cache."""

from dataclasses import replace

import numpy as np
import petlab.server.model_cache as model_cache
import pytest
from petlab.crypto.deployment import (
    KnnClient,
    client_specs_bytes,
    parse_ciphertext,
    parse_evaluation_keys,
    run_encrypted,
)
from petlab.crypto.knn_algorithms import build_any_plan
from petlab.crypto.knn_circuit import CircuitConfig
from petlab.crypto.knn_model import KnnSettings, build_model
from petlab.server.datasets import load_bundled


@pytest.fixture(scope="module")
def tiny_model():
    data = load_bundled("iris")
    return build_model("iris-tiny", data.features, data.labels, KnnSettings(n=6, k=3, bits=4))


@pytest.fixture(scope="module")
def tiny_compiled(tiny_model, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache") / "models"
    compiled = model_cache.load_or_compile(tiny_model, CircuitConfig(), cache)
    yield compiled, cache
    compiled.server.cleanup()


@pytest.fixture(scope="module")
def tiny_keys(tiny_compiled):
    """One key set for the tiny circuit (seeded: these tests are about the byte API, not keys),
    and the server's parsed evaluation keys, shared so each is made and decompressed once."""
    compiled, _ = tiny_compiled
    client = KnnClient(client_specs_bytes(compiled.server))
    client.generate_keys(secret_seed=1, encryption_seed=2)
    return client, parse_evaluation_keys(client.evaluation_keys_bytes())


def test_garbage_bytes_are_value_errors(tiny_compiled):
    with pytest.raises(ValueError, match="ciphertext"):
        parse_ciphertext(b"\x00garbage" * 10)
    with pytest.raises(ValueError, match="empty"):
        parse_ciphertext(b"")
    with pytest.raises(ValueError, match="evaluation keys"):
        parse_evaluation_keys(b"not keys at all")
    with pytest.raises(ValueError, match="client specs"):
        KnnClient(b"not specs")


@pytest.mark.slow
def test_query_of_another_shape_is_rejected(tiny_compiled, tiny_keys, hosted_model):
    """A query encrypted for another model (13 features, not 4) does not fit. A query of the same
    shape under another client's keys cannot be told apart (ciphertexts look random); the network
    layer binds each query to a registered key id and its model instead."""
    compiled, _ = tiny_compiled
    tiny_client, keys = tiny_keys
    own = run_encrypted(compiled.server, keys, parse_ciphertext(tiny_client.encrypt(np.zeros(4))))
    assert tiny_client.decrypt_class(own) in (0, 1, 2)

    wine = hosted_model("wine", KnnSettings(n=6, k=3))  # the session's, shared with test_grpc
    other = KnnClient(client_specs_bytes(wine.server))
    other.generate_keys(secret_seed=3, encryption_seed=4)
    foreign = parse_ciphertext(other.encrypt(np.zeros(13, dtype=np.int64)))
    with pytest.raises(ValueError, match="does not fit"):
        run_encrypted(compiled.server, keys, foreign)


@pytest.mark.slow
def test_evaluation_keys_carry_no_secret_key(tiny_compiled, tiny_keys):
    """What the server receives cannot be loaded as a key set (no secret key to decrypt with);
    the client's own saved key set can."""
    compiled, _ = tiny_compiled
    specs = client_specs_bytes(compiled.server)
    client, keys = tiny_keys
    with pytest.raises(ValueError, match="not a client's key set"):
        KnnClient(specs).load_keys(client.evaluation_keys_bytes())
    restored = KnnClient(specs)
    restored.load_keys(client.secret_keys_bytes())
    answer = run_encrypted(compiled.server, keys, parse_ciphertext(client.encrypt(np.zeros(4))))
    assert restored.decrypt_class(answer) == client.decrypt_class(answer)


def test_second_load_comes_from_cache(tiny_model, tiny_compiled, monkeypatch):
    _, cache = tiny_compiled
    assert cache.stat().st_mode & 0o777 == 0o700

    def must_not_compile(*args, **kwargs):
        raise AssertionError("recompiled although the cache holds the artifact")

    monkeypatch.setattr(model_cache, "compile_any", must_not_compile)
    again = model_cache.load_or_compile(tiny_model, CircuitConfig(), cache)
    try:
        assert again.from_cache and again.statistics["pbs_count"] > 0
    finally:
        again.server.cleanup()


def test_damaged_entry_is_recompiled(tiny_model, tmp_path):
    first = model_cache.load_or_compile(tiny_model, CircuitConfig(), tmp_path)
    first.server.cleanup()
    artifact = tmp_path / tiny_model.cache_key(CircuitConfig()) / "server.zip"
    artifact.write_bytes(artifact.read_bytes()[:100])
    second = model_cache.load_or_compile(tiny_model, CircuitConfig(), tmp_path)
    try:
        assert not second.from_cache
    finally:
        second.server.cleanup()


def test_cache_key_depends_on_data_and_configuration(tiny_model):
    plan = tiny_model.plan
    moved = plan.train.copy()
    moved[0, 0] = (moved[0, 0] + 1) % (plan.max_level + 1)  # one training level changed
    algorithm = tiny_model.algorithm
    other = replace(
        tiny_model, plan=build_any_plan(algorithm, moved, plan.labels, plan.n_classes, plan.k, plan.bits)
    )
    relabelled = replace(
        tiny_model,
        plan=build_any_plan(
            algorithm, plan.train, (plan.labels + 1) % plan.n_classes, plan.n_classes, plan.k, plan.bits
        ),
    )
    base = tiny_model.cache_key(CircuitConfig())
    assert base == tiny_model.cache_key(CircuitConfig())
    assert base != tiny_model.cache_key(CircuitConfig(sign_bits=3))
    assert base != other.cache_key(CircuitConfig())
    assert base != relabelled.cache_key(CircuitConfig())
    paper = replace(tiny_model, plan=build_any_plan("paper", *_plan_inputs(plan)))
    assert paper.algorithm != tiny_model.algorithm
    assert base != paper.cache_key(CircuitConfig())


def _plan_inputs(plan):
    return plan.train, plan.labels, plan.n_classes, plan.k, plan.bits


def test_public_info_hides_n_k_and_training_data(tiny_model):
    info = tiny_model.public_info()
    assert set(info) == {"name", "d", "bits", "class_names", "feature_names", "quantizer"}
    assert "n" not in info and "k" not in info
