"""The owner's condensed training set (``crypto.knn.condensation``, ``KnnSettings.condense``):
the size is chosen on the training rows only, the ladder logic, and the wine owner setting that
uses it computes exactly its clear reference in simulation (ties included) and with real keys."""

from __future__ import annotations

import numpy as np
import pytest

from petlab.crypto.knn import condensation
from petlab.crypto.knn.condensation import choose_size, size_ladder
from petlab.crypto.knn.families import classify_clear, compile_plan, default_config
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.thermo import reference
from petlab.crypto.knn.thermo.encoding import thermometer
from petlab.experiments import knn_accuracy
from petlab.server.knn.datasets import bundled_public_bounds, load_bundled, owner_settings


@pytest.fixture(scope="module")
def wine_model():
    train, test = load_bundled("wine").split(seed=1)
    settings = owner_settings("wine")
    model = build_model(
        "wine", train.features, train.labels, settings, public_bounds=bundled_public_bounds("wine")
    )
    return model, model.quantizer.transform(test.features), len(train.labels)


def test_the_condensed_size_never_depends_on_a_test_row(kept_points, replace_held_out_rows):
    """The evaluation pipeline (``knn-accuracy``) run twice on the same split, the second time with
    every held-out row replaced (other features, other labels): the owner keeps the same points."""
    knn_accuracy.split_rows("wine", 1, 40, 3, ("thermo",))
    replace_held_out_rows(features=True)
    knn_accuracy.split_rows("wine", 1, 40, 3, ("thermo",))
    (first_train, first_labels), (second_train, second_labels) = kept_points
    assert len(first_train) < 142  # condensed: fewer points than wine's training split
    assert np.array_equal(first_train, second_train) and np.array_equal(first_labels, second_labels)


def test_the_ladder_stops_at_the_first_size_that_keeps_the_accuracy(monkeypatch):
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


def test_wine_owner_setting_is_condensed_and_simulates_its_reference(wine_model, simulate_all):
    """Every held-out row of split 1 and two training points' own levels, in simulation, equal the
    clear reference; among them are ties at D_k (more than k points at distance <= D_k, counted
    by the capped vote) between classes."""
    model, levels, training_rows = wine_model
    assert model.plan.n < training_rows
    queries = np.concatenate([levels, model.plan.train[[0, -1]]])
    expected = classify_clear(model.plan, queries)
    votes = reference.trace(model.plan, queries).votes
    assert ((votes.sum(axis=1) > model.plan.k) & ((votes > 0).sum(axis=1) > 1)).any()
    circuit = compile_plan(model.plan, default_config("thermo"), simulation=True, execution=False)
    assert np.array_equal(simulate_all(circuit, thermometer(queries, model.plan.bits), expected), expected)


def test_wine_owner_setting_with_real_keys(wine_model):
    model, levels, _ = wine_model
    circuit = compile_plan(model.plan, default_config("thermo"))
    circuit.keygen()
    queries = levels[:2]  # the compilation and key generation are the cost: two queries are enough
    expected = classify_clear(model.plan, queries)
    got = [int(circuit.encrypt_run_decrypt(thermometer(q, model.plan.bits))) for q in queries]
    assert got == expected.tolist()
