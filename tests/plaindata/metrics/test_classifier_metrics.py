"""Table 3 and Table 5 machinery on the shipped ACS sample: reals agree with themselves, the
marginal baseline loses accuracy, and the distinguishing game is a coin toss between reals."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from petlab.plaindata import acs_sample_path
from petlab.plaindata.metrics.classifiers import classifier_comparison, distinguishing_accuracy


@pytest.fixture(scope="module")
def acs():
    frame = pd.read_csv(acs_sample_path())
    order = np.random.default_rng(20).permutation(len(frame))
    return frame.iloc[order[:3000]], frame.iloc[order[3000:4000]], frame.iloc[order[4000:]]


def independent_columns(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Each column shuffled on its own: the exact marginals, no dependence (the baseline's law)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: rng.permutation(frame[c].to_numpy()) for c in frame.columns})


def test_classifier_comparison(acs):
    train, _, test = acs
    scores = classifier_comparison(
        {"reals": train, "marginals": independent_columns(train, 1)}, test, "incc", classifiers=("tree", "rf")
    )
    table = {(s.data, s.classifier): s for s in scores}
    for name in ("tree", "rf"):
        assert table["reals", name].agreement == 1.0
        assert table["reals", name].accuracy > table["marginals", name].accuracy + 0.05
        assert table["marginals", name].agreement < table["reals", name].agreement - 0.1
    with pytest.raises(ValueError, match="reference"):
        classifier_comparison({"x": train}, test, "incc")


def test_distinguishing_game(acs):
    train, other, _ = acs
    real_vs_real = distinguishing_accuracy(train, other, "rf", per_class=600, seed=2)
    assert stats.binomtest(round(real_vs_real * 600), 600, 0.5).pvalue > 1e-3
    real_vs_marginals = distinguishing_accuracy(train, independent_columns(train, 3), "rf", 600, seed=2)
    assert real_vs_marginals > 0.6
    with pytest.raises(ValueError, match="needs"):
        distinguishing_accuracy(train, other.iloc[:10], "tree", per_class=600)
