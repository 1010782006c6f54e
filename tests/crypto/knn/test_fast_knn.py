"""The fast exact k-NN: clear reference against a brute-force statement of the same rule, the
selection network against a sort, the circuit (simulated) against the reference on every data
set, crafted ties, and real encryption on a few Iris queries."""

from __future__ import annotations

import numpy as np
import pytest

from petlab.crypto.knn.families import default_config
from petlab.crypto.knn.fast.circuit import compile_fast_circuit
from petlab.crypto.knn.fast.plan import (
    build_fast_plan,
    choose_scale,
    default_distance_bits,
    feature_cost_table,
)
from petlab.crypto.knn.fast.reference import classify, classify_by_sorting, trace
from petlab.crypto.knn.fast.selection_network import comparator_count, kth_smallest
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.quantization import MinMaxQuantizer
from petlab.server.knn.datasets import load_bundled

CONFIG = default_config("fast")


def brute_force(plan, queries):
    return classify_by_sorting(
        plan.train, plan.labels, plan.k, plan.n_classes, queries, plan.bits, plan.distance_bits
    )


# ------------------------------------------------------------------ clear: network and reference


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7])
def test_selection_network_finds_the_kth_smallest(k):
    rng = np.random.default_rng(k)
    calls = []

    def exchange(a, b):
        calls.append(a.shape[0])
        return np.minimum(a, b), np.maximum(a, b)

    for n in [k, k + 1, 2 * k, 2 * k + 1, 3 * k - 1, 17, 40, 41]:
        if n < k:
            continue
        values = rng.integers(0, 6, size=(n, 50))  # many equal values
        calls.clear()
        got = kth_smallest(
            values,
            k,
            pad=lambda m: np.full((m, 50), 5),
            exchange=exchange,
            minimum=lambda a, b: exchange(a, b)[0],
            maximum=lambda a, b: exchange(a, b)[1],
        )
        assert np.array_equal(got, np.sort(values, axis=0)[k - 1])
        assert sum(calls) == comparator_count(n, k)


def test_network_is_linear_in_n():
    assert comparator_count(160, 3) <= 4.2 * comparator_count(40, 3)
    assert comparator_count(40, 3) < 3.2 * 40


@pytest.mark.parametrize("name", ["iris", "wine", "breast_cancer", "digits"])
def test_reference_equals_brute_force(name):
    """The plan on n random training points (the owner's point selection is not what this checks,
    and on digits it was nine tenths of the test's CPU)."""
    data = load_bundled(name)
    quantizer = MinMaxQuantizer.fit(data.features, bits=4)
    levels, n_classes = quantizer.transform(data.features), int(data.labels.max()) + 1
    rng = np.random.default_rng(1)
    for n, k in [(40, 3), (12, 5), (7, 7)]:
        rows = rng.choice(len(levels), size=n, replace=False)
        plan = build_fast_plan(levels[rows], data.labels[rows], n_classes, k, 4)
        held = levels[::7]
        queries = np.vstack([held, rng.integers(0, 16, (200, plan.d))])
        assert np.array_equal(classify(plan, queries), brute_force(plan, queries))


def test_all_points_at_the_kth_distance_vote():
    """Attack on the tie rule: five points at the same distance, k = 2; the two 'nearest' by index
    are class 0, the other three class 1. Every tied point votes, so class 1 wins."""
    train = np.array([[0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [15, 15]])
    labels = np.array([0, 0, 1, 1, 1, 0])
    plan = build_fast_plan(train, labels, 2, 2, 4)
    result = trace(plan, np.array([[1, 1]]))
    assert result.mask[0].tolist() == [1, 1, 1, 1, 1, 0]
    assert result.votes[0].tolist() == [2, 3]
    assert result.classes.tolist() == [1]


def test_equal_votes_go_to_the_smallest_class():
    train = np.array([[0, 0], [0, 1], [15, 15], [15, 14]])
    plan = build_fast_plan(train, np.array([2, 1, 0, 0]), 3, 2, 4)
    result = trace(plan, np.array([[0, 0]]))
    assert result.votes[0].tolist() == [0, 1, 1]
    assert result.classes.tolist() == [1]


def test_distance_tables_are_public():
    """The per-feature table depends on (d, bits, distance_bits) only, never on training values."""
    rng = np.random.default_rng(0)
    first = build_fast_plan(rng.integers(0, 16, (20, 4)), np.arange(20) % 3, 3, 3, 4)
    second = build_fast_plan(rng.integers(0, 16, (20, 4)), np.arange(20) % 2, 2, 3, 4)
    assert first.scale == second.scale == choose_scale(4, 4, default_distance_bits(4))
    table = feature_cost_table(4, first.scale)
    assert np.array_equal(table, table.T) and table.max() == first.scale.cap
    assert np.all(np.diff(table[0]) >= 0)  # g grows with |q - v|


def test_fast_accuracy_is_close_to_the_papers_on_iris(iris_fast_model, iris_model, iris_split):
    _, test = iris_split
    levels = iris_fast_model.quantizer.transform(test.features)
    fast = np.mean(classify(iris_fast_model.plan, levels) == test.labels)
    assert fast >= 0.9


def test_settings_reject_an_unknown_algorithm():
    with pytest.raises(ValueError, match="algorithm"):
        KnnSettings(algorithm="quick")


# ------------------------------------------------------------------ circuit in simulation


def test_iris_simulation_equals_reference(iris_fast_circuit, iris_fast_model, iris_test_levels, simulate_all):
    plan = iris_fast_model.plan
    rng = np.random.default_rng(11)
    corners = np.array(np.meshgrid(*[[0, plan.max_level]] * plan.d)).reshape(plan.d, -1).T
    queries = np.vstack([iris_test_levels, corners, rng.integers(0, 16, size=(60, plan.d))])
    expected = trace(plan, queries)
    # crafted ties are present: equal distances at the k-th position, and more than k voters
    ordered = np.sort(expected.distances, axis=1)
    assert np.sum(ordered[:, plan.k - 1] == ordered[:, plan.k]) >= 20
    assert np.sum(expected.mask.sum(axis=1) > plan.k) >= 20
    expected_classes = expected.classes
    assert np.array_equal(simulate_all(iris_fast_circuit, queries, expected_classes), expected_classes)


def test_iris_circuit_makes_linear_many_lookups(iris_fast_circuit, iris_fast_model):
    plan = iris_fast_model.plan
    network = comparator_count(plan.n, plan.k)
    lookups = plan.n_lookups + network + plan.n
    assert lookups <= iris_fast_circuit.programmable_bootstrap_count <= lookups + 8 * plan.n_classes**2


@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 3), (4, 2), (10, 3), (11, 5)])
def test_small_n_simulation_equals_reference(n, k, simulate_all):
    data = load_bundled("iris")
    model = build_model("iris", data.features, data.labels, KnnSettings(n=n, k=k, algorithm="fast"))
    circuit = compile_fast_circuit(model.plan, CONFIG, simulation=True, execution=False)
    queries = np.random.default_rng(n).integers(0, 16, size=(40, 4))
    expected_classes = classify(model.plan, queries)
    assert np.array_equal(simulate_all(circuit, queries, expected_classes), expected_classes)


def test_ten_classes_equal_votes_and_coarsening_in_simulation(simulate_all):
    """Digits: 10 classes; 16 features with cap 1 are coarsened (d * cap > 15), 2-bit levels make
    many equal distances and equal votes, so every tie rule runs inside the circuit."""
    data = load_bundled("digits")
    features = data.features[:, [18, 19, 20, 21, 26, 27, 28, 29, 34, 35, 36, 37, 42, 43, 44, 45]]
    model = build_model("digits", features, data.labels, KnnSettings(n=20, k=4, bits=2, algorithm="fast"))
    plan = model.plan
    assert plan.scale.coarsened
    circuit = compile_fast_circuit(plan, CONFIG, simulation=True, execution=False)
    queries = np.random.default_rng(3).integers(0, 4, size=(60, features.shape[1]))
    expected = trace(plan, queries)
    top = np.sort(expected.votes, axis=1)
    assert np.sum(top[:, -1] == top[:, -2]) >= 5  # equal votes at the top
    assert len(np.unique(expected.classes)) > 2
    expected_classes = expected.classes
    assert np.array_equal(simulate_all(circuit, queries, expected_classes), expected_classes)


def test_wine_simulation_equals_reference(simulate_all):
    data = load_bundled("wine")
    model = build_model("wine", data.features, data.labels, KnnSettings(n=16, k=3, algorithm="fast"))
    circuit = compile_fast_circuit(model.plan, CONFIG, simulation=True, execution=False)
    queries = np.vstack(
        [model.quantizer.transform(data.features[::9]), np.random.default_rng(2).integers(0, 16, (20, 13))]
    )
    expected_classes = classify(model.plan, queries)
    assert np.array_equal(simulate_all(circuit, queries, expected_classes), expected_classes)


# ------------------------------------------------------------------ real encryption


@pytest.mark.slow
def test_iris_real_encryption_equals_reference(
    iris_fast_circuit, iris_fast_model, iris_test_levels, tmp_path, encrypted_answers
):
    """Two held-out queries of different classes encrypted for real, through serialized bytes
    only (the simulation tests carry the many-query checks; a real run costs seconds per query)."""
    expected = classify(iris_fast_model.plan, iris_test_levels)
    chosen = [int(np.flatnonzero(expected == c)[0]) for c in np.unique(expected)[-2:]]
    answers = encrypted_answers(iris_fast_circuit, iris_test_levels[chosen], tmp_path)
    assert len(set(answers)) == 2 and answers == expected[chosen].tolist()


def test_server_algorithm_flag_and_environment(monkeypatch):
    from petlab.server.main import parse_args

    options, _ = parse_args(["serve", "--model", "iris"])
    assert options.knn.settings.algorithm == "thermo"  # the default family
    monkeypatch.setenv("PETLAB_ALGORITHM", "paper")
    options, _ = parse_args(["serve", "--model", "iris"])
    assert options.knn.settings.algorithm == "paper"
    options, _ = parse_args(["serve", "--model", "iris", "--algorithm", "fast"])
    assert options.knn.settings.algorithm == "fast"
    with pytest.raises(SystemExit):
        parse_args(["serve", "--model", "iris", "--algorithm", "quick"])


def test_cache_key_names_the_algorithm(iris_split):
    train, _ = iris_split
    keys = {
        algorithm: build_model(
            "iris", train.features, train.labels, KnnSettings(n=6, algorithm=algorithm)
        ).cache_key(default_config(algorithm))
        for algorithm in ("fast", "paper")
    }
    assert keys["fast"] != keys["paper"]


# ------------------------------------------------------------------ lookups and the input set


def _compile_tiny(function, parameters, inputset):
    from concrete import fhe

    return fhe.Compiler(function, {name: "encrypted" for name in parameters}).compile(
        inputset, CONFIG.concrete_configuration(simulation=True, execution=False)
    )


def test_lookups_are_exact_for_orders_the_input_set_never_showed():
    """Attack on exactness through the input set: concrete takes a lookup input's signedness from
    the values the input set produced. Compiled on pairs with a >= b only (and dist >= kth, and
    votes where class 0 always wins), the compare-exchange, the tie test and the vote must still
    be right for the other order. Reading ``a - b`` unshifted, concrete drops the comparator as
    constant: a split partition then gives unsorted k-lists on 2 % of the queries."""
    from concrete import fhe

    from petlab.crypto.knn.fast.circuit import decision_function, exchange_function, within_function

    train = np.array([[0, 0], [15, 15], [3, 9]] * 3)
    plan = build_fast_plan(train, np.array([0, 1, 2] * 3), 3, 1, 4)  # up to 3 votes per class
    top = plan.scale.distance_max
    exchange, within = exchange_function(plan), within_function(plan)
    ordered = [(a, b) for a in range(top + 1) for b in range(top + 1) if a >= b]
    pairs = _compile_tiny(
        lambda a, b: np.concatenate(tuple(fhe.zeros((1,)) + v for v in exchange(a, b))), "ab", ordered
    )
    inside = _compile_tiny(lambda a, b: within(a, b), "ab", ordered)
    for a, b in [(0, top), (2, 5), (top - 1, top)]:
        assert pairs.simulate(a, b).tolist() == [a, b]
        assert inside.simulate(a, b) == 1
    decide = decision_function(plan, CONFIG)
    class_zero = [np.array([v, w, x]) for v in range(1, 4) for w in range(v) for x in range(v)]
    vote = _compile_tiny(lambda votes: decide(votes), ["votes"], class_zero)
    for votes, winner in [([0, 3, 1], 1), ([0, 1, 2], 2), ([1, 3, 3], 1), ([2, 2, 0], 0), ([0, 0, 0], 0)]:
        assert vote.simulate(np.array(votes)) == winner
