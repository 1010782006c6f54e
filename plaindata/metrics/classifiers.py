"""Machine-learning utility of synthetic records, and the distinguishing game.

Bindschaedler, Shokri and Gunter (VLDB 2017), Sections 6.3-6.4.

* Classifier comparison (Table 3): train a classifier of the target (income class) on each data
  set, measure its accuracy on a held-out test set of reals, and its agreement rate with the same
  classifier trained on reals: the share of test records on which the two predict the same class,
  right or wrong. Classifiers: a classification tree, a random forest, and AdaBoost (the paper's
  AdaBoostM1; scikit-learn's AdaBoost with decision stumps is the same algorithm, SAMME for two
  classes).
* Distinguishing game (Table 5): train a classifier to tell reals (label 0) from synthetics
  (label 1) on equally many of each, then measure its accuracy on a disjoint 50/50 mix. 50% means
  the synthetics pass off as reals; the paper reports 79.8% (RF) against marginals and about 62%
  against its synthetics.

Attributes are integer codes; trees split them as ordered values, as the paper's Weka classifiers
did for its numeric attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.ensemble import AdaBoostClassifier, RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier

CLASSIFIERS = ("tree", "rf", "ada")


def make_classifier(name: str, seed: int):
    if name == "tree":
        return DecisionTreeClassifier(min_samples_leaf=5, random_state=seed)
    if name == "rf":
        return RandomForestClassifier(n_estimators=100, min_samples_leaf=2, n_jobs=-1, random_state=seed)
    if name == "ada":
        return AdaBoostClassifier(n_estimators=100, random_state=seed)
    raise ValueError(f"unknown classifier {name!r}; choose from {CLASSIFIERS}")


@dataclass(frozen=True)
class ClassifierScore:
    data: str
    classifier: str
    accuracy: float
    agreement: float


def classifier_comparison(
    training: dict[str, pd.DataFrame],
    test: pd.DataFrame,
    target: str,
    reference: str = "reals",
    classifiers: tuple[str, ...] = CLASSIFIERS,
    seed: int = 0,
) -> list[ClassifierScore]:
    """Table 3: accuracy on ``test`` and agreement with the classifier trained on ``training[reference]``."""
    if reference not in training:
        raise ValueError(f"the reference data set {reference!r} is not among the training sets")
    features = [c for c in test.columns if c != target]
    x_test, y_test = test[features].to_numpy(), test[target].to_numpy()
    scores = []
    for name in classifiers:
        predictions = {
            label: make_classifier(name, seed)
            .fit(frame[features].to_numpy(), frame[target].to_numpy())
            .predict(x_test)
            for label, frame in training.items()
        }
        for label, predicted in predictions.items():
            scores.append(
                ClassifierScore(
                    label,
                    name,
                    float(np.mean(predicted == y_test)),
                    float(np.mean(predicted == predictions[reference])),
                )
            )
    return scores


def distinguishing_accuracy(
    reals: pd.DataFrame, synthetics: pd.DataFrame, classifier: str, per_class: int, seed: int = 0
) -> float:
    """Table 5: accuracy of ``classifier`` at telling reals from synthetics on a held-out 50/50 mix.

    Uses ``per_class`` records of each for training and ``per_class // 2`` of each, disjoint from
    them, for testing."""
    test_size = per_class // 2
    need = per_class + test_size
    if len(reals) < need or len(synthetics) < need:
        raise ValueError(f"the game needs {need} records of each kind")
    if list(reals.columns) != list(synthetics.columns):
        raise ValueError("reals and synthetics must have the same columns")
    rng = np.random.default_rng(seed)
    r = reals.to_numpy()[rng.permutation(len(reals))[:need]]
    s = synthetics.to_numpy()[rng.permutation(len(synthetics))[:need]]
    x_train = np.vstack([r[:per_class], s[:per_class]])
    y_train = np.r_[np.zeros(per_class), np.ones(per_class)]
    x_test = np.vstack([r[per_class:], s[per_class:]])
    y_test = np.r_[np.zeros(test_size), np.ones(test_size)]
    model = make_classifier(classifier, seed).fit(x_train, y_train)
    return float(np.mean(model.predict(x_test) == y_test))
