import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier

from petlab.crypto.knn.paper.reference import classify
from petlab.crypto.knn.training_points import best_random_subset, select_training_points, subset_score


def test_selection_is_at_least_as_good_as_the_papers_best_of_random(iris_model, iris_split):
    train, _ = iris_split
    levels = iris_model.quantizer.transform(train.features)
    _, paper_score = best_random_subset(levels, train.labels, 40, 3, 3, np.random.default_rng(0), 100)
    selection = iris_model.selection
    assert selection.random_baseline_score == pytest.approx(paper_score)
    assert selection.score >= paper_score
    recomputed = subset_score(levels, train.labels, selection.indices, 3, 3)
    assert recomputed == pytest.approx(selection.score)


def test_selection_is_seeded_and_well_formed(iris_split):
    train, _ = iris_split
    levels = np.asarray(train.features * 2, dtype=np.int64)
    first = select_training_points(levels, train.labels, 20, 3, 3, seed=5, swap_rounds=50)
    again = select_training_points(levels, train.labels, 20, 3, 3, seed=5, swap_rounds=50)
    assert np.array_equal(first.indices, again.indices)
    assert len(np.unique(first.indices)) == 20 and np.all(np.diff(first.indices) > 0)


def test_iris_clear_reference_accuracy(iris_model, iris_split, iris_test_levels):
    """The target: the quantized clear reference reaches 0.93 on held-out Iris."""
    train, test = iris_split
    accuracy = np.mean(classify(iris_model.plan, iris_test_levels) == test.labels)
    sklearn_accuracy = (
        KNeighborsClassifier(3).fit(train.features, train.labels).score(test.features, test.labels)
    )
    print(f"clear reference {accuracy:.3f}, scikit-learn on unquantized data {sklearn_accuracy:.3f}")
    assert accuracy >= 0.93


def test_selection_rejects_bad_sizes(iris_split):
    train, _ = iris_split
    levels = np.zeros_like(train.features, dtype=np.int64)
    with pytest.raises(ValueError, match="n must be"):
        select_training_points(levels, train.labels, 1, 1, 3)
    with pytest.raises(ValueError, match="k must be"):
        select_training_points(levels, train.labels, 10, 11, 3)


def test_n_larger_than_training_set_keeps_everything():
    levels = np.array([[0], [3], [5]])
    selection = select_training_points(levels, np.array([0, 1, 1]), 10, 1, 2)
    assert selection.indices.tolist() == [0, 1, 2]
