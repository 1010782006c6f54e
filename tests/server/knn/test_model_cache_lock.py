"""Two servers sharing one compile cache: one compiles, the other waits and loads its artifact."""

import threading
import time

import pytest

import petlab.server.knn.model_cache as model_cache
from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.server.knn.datasets import load_bundled


@pytest.fixture(scope="module")
def small_model():
    data = load_bundled("iris")
    return build_model(
        "iris-lock", data.features, data.labels, KnnSettings(n=4, k=3, bits=3, algorithm="fast")
    )


def test_concurrent_loads_compile_once_and_share_the_entry(small_model, tmp_path, monkeypatch):
    """Two threads stand for two servers (``flock`` locks of separate opens exclude each other
    within a process too). Without the entry lock both callers find no entry and both compile (and
    one may delete the entry the other is reading): here the second waits, then loads the first
    one's artifact. concrete traces on one thread only, so the stub returns a circuit compiled here."""
    circuit = model_cache.compile_plan(small_model.plan, CircuitConfig())
    compiles = []

    def slow_compile(*args, **kwargs):
        compiles.append(threading.get_ident())
        time.sleep(0.5)  # the other caller arrives while this one still compiles
        return circuit

    monkeypatch.setattr(model_cache, "compile_plan", slow_compile)
    results: list = []
    errors: list = []

    def load():
        try:
            results.append(model_cache.load_or_compile(small_model, CircuitConfig(), tmp_path / "models"))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert not errors and len(results) == 2
        assert len(compiles) == 1
        assert sorted(r.from_cache for r in results) == [False, True]
        assert results[0].statistics == results[1].statistics
    finally:
        for compiled in results:
            compiled.server.cleanup()


def test_the_lock_wait_is_bounded(tmp_path):
    lock = tmp_path / ".entry.lock"
    with model_cache.entry_lock(lock) as held:
        assert held
        started = time.monotonic()
        with model_cache.entry_lock(lock, timeout=0.3) as second:
            assert not second
        assert 0.3 <= time.monotonic() - started < 5
    with model_cache.entry_lock(lock, timeout=0) as again:
        assert again
