"""How many training points the data owner keeps, chosen on its own training rows only.

Every point the circuit keeps costs about two comparator lookups (``crypto.knn.thermo.cost``), so
the owner wants the smallest n whose k-NN decisions are as good as the whole training set's. The
n points themselves come from ``crypto.knn.training_points`` (best random subset, class
prototypes, swap hill climbing; Ameur et al., PSD 2022, Section 4.1); this module picks n by
hold-out validation *inside* the training set, the textbook way to tune a hyper-parameter without
the test rows (Hastie, Tibshirani and Friedman, *The Elements of Statistical Learning*, 2nd ed.,
Section 7.2):

1. Split the owner's training rows into ``folds`` stratified folds (seeded); each fold is
   validated once against a fitting part made of the others (cross-validation, Section 7.10).
2. For each candidate n of :func:`size_ladder` (increasing), select n points of every fitting
   part with the circuit's own rule and measure their accuracy on its fold; the reference is the
   whole fitting part's accuracy on the same rows. Accuracies are pooled over the folds.
3. Keep the first n whose pooled accuracy is at least the reference minus ``tolerance``; if none
   qualifies, keep every training point (``None``).

Nothing here sees a test row: the caller hands over the training split only (``build_model``),
and ``tests/crypto/knn/test_condensation.py`` checks that changing every test row changes nothing.
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import StratifiedKFold

from petlab.crypto.knn.training_points import Classifier, select_training_points

# the candidate search uses a cheaper selection than the final one (same method, fewer rounds)
SEARCH_RANDOM_ROUNDS = 20
SEARCH_SWAP_ROUNDS = 150


def size_ladder(size: int, k: int, n_classes: int, smallest: int = 20, growth: float = 1.5) -> list[int]:
    """Candidate n, increasing: ``smallest`` (at least k per class), then times ``growth``, all
    below ``size`` (the whole set is the fallback, not a candidate)."""
    n = max(smallest, k * n_classes)
    ladder = []
    while n < size:
        ladder.append(int(n))
        n = int(np.ceil(n * growth))
    return ladder


def choose_size(
    levels: np.ndarray,
    labels: np.ndarray,
    k: int,
    n_classes: int,
    classifier: Classifier,
    tolerance: float,
    seed: int = 0,
    folds: int = 4,
) -> int | None:
    """The smallest n of :func:`size_ladder` within ``tolerance`` (a fraction, 0.01 = one point) of
    the whole set, cross-validated on the *training* rows (module docstring); ``None`` keeps every
    point."""
    if not 0 <= tolerance < 1:
        raise ValueError(f"the condensation tolerance must be in [0, 1), got {tolerance}")
    levels, labels = np.asarray(levels), np.asarray(labels)
    splits = list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(levels, labels))
    fit_size = min(len(fit) for fit, _ in splits)

    def correct(fit: np.ndarray, check: np.ndarray, n: int | None) -> int:
        """Validation rows of one fold classified right with n points of its fitting part."""
        kept = np.arange(len(fit))
        if n is not None:
            kept = select_training_points(
                levels[fit],
                labels[fit],
                n,
                k,
                n_classes,
                seed=seed,
                random_rounds=SEARCH_RANDOM_ROUNDS,
                swap_rounds=SEARCH_SWAP_ROUNDS,
                classifier=classifier,
            ).indices
        predicted = classifier(levels[fit][kept], labels[fit][kept], k, n_classes, levels[check])
        return int(np.sum(predicted == labels[check]))

    reference = sum(correct(fit, check, None) for fit, check in splits) / len(labels)
    for n in size_ladder(fit_size, k, n_classes):
        if sum(correct(fit, check, n) for fit, check in splits) / len(labels) >= reference - tolerance:
            # the same share of the whole training set as of a fitting part
            return int(np.ceil(n * len(labels) / fit_size))
    return None
