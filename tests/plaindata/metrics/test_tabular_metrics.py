import numpy as np
import pandas as pd
import pytest

from petlab.plaindata import acs_sample_path
from petlab.plaindata.metrics.tabular import all_marginal_tvds, marginal_tvd, pmse


def test_tvd_by_hand():
    real = pd.DataFrame({"a": [1, 1, 2, 2], "b": [1, 2, 1, 2]})
    synthetic = pd.DataFrame({"a": [1, 1, 1, 2], "b": [1, 1, 2, 2]})
    assert marginal_tvd(real, synthetic, ("a",)) == pytest.approx(0.25)  # |0.5-0.75| + |0.5-0.25|, halved
    assert marginal_tvd(real, real, ("a", "b")) == 0
    assert marginal_tvd(real, real + 10, ("a",)) == 1
    tvds = all_marginal_tvds(real, synthetic, 2)
    assert set(tvds) == {("a", "b")}
    assert tvds["a", "b"] == pytest.approx(0.25)  # cells (1,1) 0.25 vs 0.5, (2,1) 0.25 vs 0


@pytest.fixture(scope="module")
def acs() -> pd.DataFrame:
    return pd.read_csv(acs_sample_path())[["sex", "race", "ms", "incc"]]


def test_pmse_ratio_is_near_one_under_the_null(acs):
    """Random halves of one data set come from the same distribution: the ratio averages ~1."""
    rng = np.random.default_rng(5)
    ratios = []
    for _ in range(20):
        order = rng.permutation(len(acs))
        ratios.append(pmse(acs.iloc[order[:2500]], acs.iloc[order[2500:]]).ratio)
    assert 0.7 < np.mean(ratios) < 1.3


def test_pmse_detects_a_distorted_synthesis(acs):
    rng = np.random.default_rng(6)
    distorted = acs.copy()
    flip = rng.random(len(acs)) < 0.3
    distorted.loc[flip, "incc"] = 3 - distorted.loc[flip, "incc"]
    result = pmse(acs, distorted)
    assert result.ratio > 5 and result.standardized > 10
