"""The plan-based clear reference against an independently written k-NN (the oracle)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petlab.crypto.knn.paper.plan import build_plan
from petlab.crypto.knn.paper.reference import classify, classify_by_sorting, trace


def test_reference_equals_sorting_oracle_on_iris(iris_model, iris_test_levels):
    plan = iris_model.plan
    rng = np.random.default_rng(7)
    queries = np.vstack([iris_test_levels, rng.integers(0, 16, size=(500, plan.d))])
    expected = classify_by_sorting(plan.train, plan.labels, plan.k, plan.n_classes, queries)
    assert np.array_equal(classify(plan, queries), expected)


@st.composite
def small_problems(draw):
    bits = draw(st.integers(1, 3))
    n = draw(st.integers(2, 12))
    d = draw(st.integers(1, 4))
    n_classes = draw(st.integers(2, 4))
    top = (1 << bits) - 1
    train = np.array(
        draw(st.lists(st.lists(st.integers(0, top), min_size=d, max_size=d), min_size=n, max_size=n))
    )
    labels = np.array(draw(st.lists(st.integers(0, n_classes - 1), min_size=n, max_size=n)))
    k = draw(st.integers(1, n))
    queries = np.array(
        draw(st.lists(st.lists(st.integers(0, top), min_size=d, max_size=d), min_size=1, max_size=20))
    )
    return train, labels, n_classes, k, bits, queries


@settings(max_examples=300)
@given(small_problems())
def test_reference_equals_oracle_with_ties(problem):
    """Tiny domains force equal distances and equal votes: both tie rules must match the oracle."""
    train, labels, n_classes, k, bits, queries = problem
    plan = build_plan(train, labels, n_classes, k, bits)
    result = trace(plan, queries)
    assert np.array_equal(result.classes, classify_by_sorting(train, labels, k, n_classes, queries))
    assert np.array_equal(np.sort(result.ranks, axis=1), np.tile(np.arange(plan.n), (len(queries), 1)))
    assert np.all(result.mask.sum(axis=1) == k)
    assert np.all(result.votes.sum(axis=1) == k)


def test_difference_bits_hold_every_corner_of_the_query_box(iris_model):
    plan = iris_model.plan
    corners = np.array(np.meshgrid(*[[0, plan.max_level]] * plan.d)).reshape(plan.d, -1).T
    differences = corners @ plan.pair_weights + plan.pair_offsets
    half = 1 << (plan.difference_bits - 1)
    assert differences.min() >= -half and differences.max() < half
    assert differences.min() < -(half >> 1) or differences.max() >= half >> 1  # not one bit too wide


def test_only_upper_triangle_pairs_are_compared(iris_model):
    plan = iris_model.plan
    assert plan.n_pairs == plan.n * (plan.n - 1) // 2


def test_k_equal_to_n_votes_over_everything():
    train = np.array([[0], [1], [2], [3], [4]])
    labels = np.array([1, 0, 1, 0, 2])
    plan = build_plan(train, labels, 3, 5, 3)
    # every query sees all 5 points: votes (2, 2, 1), tie between 0 and 1 goes to class 0
    assert classify(plan, np.array([[0], [7], [4]])).tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    "train, labels, n_classes, k, message",
    [
        (np.array([[0], [1]]), np.array([0, 1]), 2, 3, "k must be between"),
        (np.array([[0], [1]]), np.array([0, 1]), 2, 0, "k must be between"),
        (np.array([[0], [1]]), np.array([0, 0]), 1, 1, "at least two classes"),
        (np.array([0, 1]), np.array([0, 1]), 2, 1, "2-D"),
        (np.array([[0.5], [1.0]]), np.array([0, 1]), 2, 1, "quantized integers"),
        (np.array([[0], [16]]), np.array([0, 1]), 2, 1, "levels must lie"),
        (np.array([[0], [1]]), np.array([0, 1, 1]), 2, 1, "labels"),
        (np.array([[0], [1]]), np.array([0, 2]), 2, 1, "class indices"),
        (np.array([[0]]), np.array([0]), 2, 1, "at least two points"),
    ],
)
def test_build_plan_rejects_bad_input(train, labels, n_classes, k, message):
    with pytest.raises(ValueError, match=message):
        build_plan(train, labels, n_classes, k, 4)


def test_queries_are_validated(iris_model):
    plan = iris_model.plan
    with pytest.raises(ValueError, match="4 features"):
        classify(plan, np.zeros(5, dtype=np.int64))
    with pytest.raises(ValueError, match="quantized integers"):
        classify(plan, np.zeros(4))
    with pytest.raises(ValueError, match="levels must lie"):
        classify(plan, np.array([0, 0, 0, 16]))
