"""The exact law of Algorithm 1 for one destination: the oracle the OnTheMap tests compare the
release's frequencies and privacy ratios with."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln


def dirichlet_multinomial_logpmf(m: np.ndarray, n: np.ndarray, alpha: np.ndarray) -> float:
    """log P(m | n, alpha) of Algorithm 1 (Machanavajjhala et al., ICDE 2008, Section III) for
    one destination: the Dirichlet-multinomial with parameters n + alpha and m.sum() draws."""
    m, posterior = np.asarray(m, dtype=float), np.asarray(n, dtype=float) + np.asarray(alpha, dtype=float)
    total = m.sum()
    return float(
        gammaln(total + 1)
        - gammaln(m + 1).sum()
        + gammaln(posterior.sum())
        - gammaln(posterior.sum() + total)
        + (gammaln(m + posterior) - gammaln(posterior)).sum()
    )
