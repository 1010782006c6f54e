"""Byte-level API error handling and the on-disk compile cache."""

import hashlib
import json
import os
import shutil
from dataclasses import replace

import numpy as np
import pytest

import petlab.server.knn.cache_integrity as cache_integrity
import petlab.server.knn.model_cache as model_cache
from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.deployment import (
    KnnClient,
    client_specs_bytes,
    parse_ciphertext,
    parse_evaluation_keys,
    run_encrypted,
)
from petlab.crypto.knn.families import build_plan
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.thermo.encoding import thermometer
from petlab.server.knn.cache_integrity import UnsafeCache
from petlab.server.knn.datasets import load_bundled


@pytest.fixture(scope="module")
def tiny_model():
    data = load_bundled("iris")
    return build_model(
        "iris-tiny", data.features, data.labels, KnnSettings(n=6, k=3, bits=4, algorithm="fast")
    )


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
def test_query_of_another_shape_is_rejected(tiny_compiled, tiny_keys, keyed_model):
    """A query encrypted for another model (13 features, not 4) does not fit. A query of the same
    shape under another client's keys cannot be told apart (ciphertexts look random); the network
    layer binds each query to a registered key id and its model instead."""
    compiled, _ = tiny_compiled
    tiny_client, keys = tiny_keys
    own = run_encrypted(compiled.server, keys, parse_ciphertext(tiny_client.encrypt(np.zeros(4))))
    assert tiny_client.decrypt_class(own) in (0, 1, 2)

    _, other = keyed_model("wine", KnnSettings(n=6))  # keys shared with test_foreign_keys
    foreign = parse_ciphertext(other.encrypt(thermometer(np.zeros(13, dtype=np.int64), 4)))
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

    monkeypatch.setattr(model_cache, "compile_plan", must_not_compile)
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
        tiny_model, plan=build_plan(algorithm, moved, plan.labels, plan.n_classes, plan.k, plan.bits)
    )
    relabelled = replace(
        tiny_model,
        plan=build_plan(
            algorithm, plan.train, (plan.labels + 1) % plan.n_classes, plan.n_classes, plan.k, plan.bits
        ),
    )
    base = tiny_model.cache_key(CircuitConfig())
    assert base == tiny_model.cache_key(CircuitConfig())
    assert base != tiny_model.cache_key(CircuitConfig(sign_bits=3))
    assert base != other.cache_key(CircuitConfig())
    assert base != relabelled.cache_key(CircuitConfig())
    paper = replace(tiny_model, plan=build_plan("paper", *_plan_inputs(plan)))
    assert paper.algorithm != tiny_model.algorithm
    assert base != paper.cache_key(CircuitConfig())


def _plan_inputs(plan):
    return plan.train, plan.labels, plan.n_classes, plan.k, plan.bits


def test_public_info_hides_n_k_and_training_data(tiny_model):
    info = tiny_model.public_info()
    assert set(info) == {"name", "d", "bits", "class_names", "feature_names", "quantizer"}
    assert "n" not in info and "k" not in info


# ------------------------------------------------------------------ cache integrity


class _Recompiled(Exception):
    pass


def _copy_cache(source, target):
    shutil.copytree(source, target)
    target.chmod(0o700)
    return target


def _refuse_to_load_or_compile(monkeypatch) -> list:
    """Record every artifact concrete would load; make any recompilation raise ``_Recompiled``."""
    loaded: list = []
    monkeypatch.setattr(model_cache, "load_server", lambda path: loaded.append(path))

    def recompile(*args, **kwargs):
        raise _Recompiled

    monkeypatch.setattr(model_cache, "compile_plan", recompile)
    return loaded


@pytest.mark.parametrize("tamper", ["artifact", "metadata", "planted", "swapped-key"])
def test_tampered_entry_is_never_loaded(tiny_model, tiny_compiled, tmp_path, monkeypatch, tamper):
    """Someone who can write the entry but does not hold the MAC key: an edited artifact whose
    digest in meta.json is updated to match, edited metadata, an entry planted without a MAC, or a
    cache whose key was replaced. concrete never opens the artifact; the entry is rebuilt."""
    _, source = tiny_compiled
    cache = _copy_cache(source, tmp_path / "models")
    entry = cache / tiny_model.cache_key(CircuitConfig())
    artifact, meta_path = entry / "server.zip", entry / "meta.json"
    meta = json.loads(meta_path.read_text())
    if tamper == "artifact":
        artifact.write_bytes(artifact.read_bytes() + b"\x00appended by an attacker")
        meta["sha256"] = hashlib.sha256(artifact.read_bytes()).hexdigest()
    elif tamper == "metadata":
        meta["statistics"]["pbs_count"] = 1
    elif tamper == "planted":
        del meta["mac"]
    else:
        (cache / "mac.key").write_bytes(bytes(32))
    meta_path.write_text(json.dumps(meta))
    loaded = _refuse_to_load_or_compile(monkeypatch)
    with pytest.raises(_Recompiled):
        model_cache.load_or_compile(tiny_model, CircuitConfig(), cache)
    assert loaded == [] and not entry.exists()


def test_untouched_copy_of_the_cache_still_loads(tiny_model, tiny_compiled, tmp_path, monkeypatch):
    """The counterpart of the tamper test: the same copy, unaltered, is loaded (so the MAC check
    is what refuses the tampered ones)."""
    _, source = tiny_compiled
    cache = _copy_cache(source, tmp_path / "models")
    loaded = _refuse_to_load_or_compile(monkeypatch)
    compiled = model_cache.load_or_compile(tiny_model, CircuitConfig(), cache)
    assert compiled.from_cache and loaded == [cache / tiny_model.cache_key(CircuitConfig()) / "server.zip"]


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_cache_writable_by_others_is_refused(tiny_model, tmp_path, monkeypatch, mode):
    cache = tmp_path / "models"
    cache.mkdir()
    cache.chmod(mode)
    _refuse_to_load_or_compile(monkeypatch)
    with pytest.raises(UnsafeCache, match="writable by other users"):
        model_cache.load_or_compile(tiny_model, CircuitConfig(), cache)


def test_cache_of_another_user_is_refused(tiny_model, tmp_path, monkeypatch):
    cache = tmp_path / "models"
    cache.mkdir(mode=0o700)
    _refuse_to_load_or_compile(monkeypatch)
    foreign = os.stat(cache).st_uid + 4242
    monkeypatch.setattr(cache_integrity.os, "getuid", lambda: foreign)
    with pytest.raises(UnsafeCache, match="belongs to user id"):
        model_cache.load_or_compile(tiny_model, CircuitConfig(), cache)


def test_cache_key_is_owner_only_and_a_readable_key_is_refused(tiny_compiled, tmp_path):
    _, source = tiny_compiled
    assert (source / "mac.key").stat().st_mode & 0o777 == 0o600
    cache = _copy_cache(source, tmp_path / "models")
    (cache / "mac.key").chmod(0o644)
    with pytest.raises(UnsafeCache, match="readable or writable by others"):
        cache_integrity.EntryMac.for_directory(cache)


def test_new_cache_directory_is_private(tiny_model, tmp_path, monkeypatch):
    cache = tmp_path / "fresh" / "models"
    _refuse_to_load_or_compile(monkeypatch)
    with pytest.raises(_Recompiled):
        model_cache.load_or_compile(tiny_model, CircuitConfig(), cache)
    assert cache.stat().st_mode & 0o777 == 0o700
    assert (cache / "mac.key").stat().st_mode & 0o777 == 0o600


def test_server_refuses_a_shared_model_cache_at_start(tmp_path, capsys):
    """Through the CLI: a data directory whose model cache others can write stops the server
    before anything is compiled or loaded (exit 2, the reason on stderr)."""
    from petlab.server.main import main as server_main

    (tmp_path / "models").mkdir(mode=0o700)
    (tmp_path / "models").chmod(0o777)
    status = server_main(["serve", "--data-dir", str(tmp_path), "--model", "iris", "--n", "6", "--port", "0"])
    assert status == 2 and "writable by other users" in capsys.readouterr().err


def test_staging_left_by_a_killed_compile_is_removed(tmp_path):
    old, young = tmp_path / ".staging-old", tmp_path / ".staging-young"
    for path in (old, young):
        path.mkdir()
        (path / "server.zip").write_bytes(b"half")
    os.utime(old, (1, 1))
    assert model_cache.remove_stale_staging(tmp_path) == [old]
    assert not old.exists() and young.exists()


def test_a_compilation_is_announced_before_it_starts(tmp_path, monkeypatch, caplog):
    """The first start compiles each model, silently for up to a minute: the log says so first,
    with the cache the result goes to (the compiler is replaced: nothing is compiled here)."""

    class Stop(Exception):
        pass

    def compiler_started(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(model_cache, "compile_plan", compiler_started)
    train, _ = load_bundled("iris").split()
    model = build_model("iris", train.features, train.labels, KnnSettings(n=4, k=1))
    with caplog.at_level("INFO", logger=model_cache.log.name), pytest.raises(Stop):
        model_cache.load_or_compile(model, CircuitConfig(), tmp_path / "cache")
    assert f"compiling model iris (n=4, d=4): not in the cache {tmp_path / 'cache'} yet" in caplog.text
    assert "later starts load it from the cache" in caplog.text
