"""The owner's condensed training set (``crypto.knn.condensation``, ``KnnSettings.condense``):
the size is chosen on the training rows only, the ladder logic, and the wine owner setting that
uses it computes exactly its clear reference in simulation (ties included) and with real keys."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from petlab.crypto.knn import condensation
from petlab.crypto.knn.condensation import choose_size, size_ladder
from petlab.crypto.knn.families import classify_clear, compile_plan, default_config
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.thermo import reference
from petlab.crypto.knn.thermo.encoding import thermometer
from petlab.experiments import knn_accuracy
from petlab.server.knn.datasets import bundled_public_bounds, load_bundled, owner_settings


@pytest.fixture
def one_openmp_thread():
    """The point selection's k-means (scikit-learn) on one OpenMP thread: on tiny inputs its
    threads mostly spin, and on 2 cores shared by two test workers that spinning was about half
    of these tests' CPU. The selected points are the same computation."""
    with threadpool_limits(limits=1, user_api="openmp"):
        yield


@pytest.fixture(scope="module")
def wine_model():
    train, test = load_bundled("wine").split(seed=1)
    settings = owner_settings("wine")
    with threadpool_limits(limits=1, user_api="openmp"):  # see one_openmp_thread
        model = build_model(
            "wine", train.features, train.labels, settings, public_bounds=bundled_public_bounds("wine")
        )
    return model, model.quantizer.transform(test.features), len(train.labels)


@pytest.fixture(scope="module")
def wine_circuit(wine_model):
    """The wine owner setting's circuit, compiled once for simulation and real execution (one
    compilation instead of two: the simulation and the real-key tests share it)."""
    model, _, _ = wine_model
    return compile_plan(model.plan, default_config("thermo"), simulation=True, execution=True)


def test_the_condensed_size_never_depends_on_a_test_row(
    kept_points, replace_held_out_rows, monkeypatch, one_openmp_thread
):
    """The evaluation pipeline (``knn-accuracy``) run twice on the same split, the second time with
    every held-out row replaced (other features, other labels): the owner keeps the same points."""
    monkeypatch.setattr(condensation, "SEARCH_RANDOM_ROUNDS", 1)  # a cheaper search: same data flow
    monkeypatch.setattr(condensation, "SEARCH_SWAP_ROUNDS", 0)
    knn_accuracy.split_rows("wine", 1, 40, 3, ("thermo",))
    replace_held_out_rows(features=True)
    knn_accuracy.split_rows("wine", 1, 40, 3, ("thermo",))
    (first_train, first_labels), (second_train, second_labels) = kept_points
    assert len(first_train) < 142  # condensed: fewer points than wine's training split
    assert np.array_equal(first_train, second_train) and np.array_equal(first_labels, second_labels)


def test_the_ladder_stops_at_the_first_size_that_keeps_the_accuracy(monkeypatch, one_openmp_thread):
    """A stub rule that answers right only with at least 40 points: the first ladder size >= 40
    is kept (scaled from a fitting part to the whole set); a zero-tolerance rule that needs every
    point keeps the whole set (None)."""
    monkeypatch.setattr(condensation, "SEARCH_RANDOM_ROUNDS", 1)
    monkeypatch.setattr(condensation, "SEARCH_SWAP_ROUNDS", 0)
    rng = np.random.default_rng(0)
    levels = rng.integers(0, 16, size=(200, 3))
    labels = np.arange(200) % 2
    truth = {row.tobytes(): label for row, label in zip(levels, labels, strict=True)}

    def needs(points):
        def rule(train, train_labels, k, n_classes, queries):
            if len(train) < points:
                return np.zeros(len(queries), dtype=np.int64)
            return np.array([truth[q.tobytes()] for q in np.asarray(queries)])

        return rule

    fit_size = 150  # four folds of 200
    ladder = size_ladder(fit_size, 3, 2)
    assert ladder == sorted(ladder) and ladder[0] == 20 and ladder[-1] < fit_size
    first = next(n for n in ladder if n >= 40)
    assert choose_size(levels, labels, 3, 2, needs(40), 0.0) == int(np.ceil(first * 200 / fit_size))
    assert choose_size(levels, labels, 3, 2, needs(fit_size), 0.0) is None
    with pytest.raises(ValueError):
        KnnSettings(n=None, condense=1.5)


def test_wine_owner_setting_is_condensed_and_simulates_its_reference(wine_model, wine_circuit, simulate_all):
    """Every held-out row of split 1 and two training points' own levels, in simulation, equal the
    clear reference; among them are ties at D_k (more than k points at distance <= D_k, counted
    by the capped vote) between classes."""
    model, levels, training_rows = wine_model
    assert model.plan.n < training_rows
    queries = np.concatenate([levels, model.plan.train[[0, -1]]])
    expected = classify_clear(model.plan, queries)
    votes = reference.trace(model.plan, queries).votes
    assert ((votes.sum(axis=1) > model.plan.k) & ((votes > 0).sum(axis=1) > 1)).any()
    assert np.array_equal(
        simulate_all(wine_circuit, thermometer(queries, model.plan.bits), expected), expected
    )


def test_wine_owner_setting_with_real_keys(wine_model, wine_circuit):
    model, levels, _ = wine_model
    wine_circuit.keygen()
    # the key generation is the cost: two queries are enough, held-out rows of different classes
    clear = classify_clear(model.plan, levels)
    queries = levels[[int(np.flatnonzero(clear == c)[0]) for c in np.unique(clear)[-2:]]]
    expected = classify_clear(model.plan, queries)
    assert len(set(expected.tolist())) == 2
    got = [int(wine_circuit.encrypt_run_decrypt(thermometer(q, model.plan.bits))) for q in queries]
    assert got == expected.tolist()
