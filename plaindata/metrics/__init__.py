"""Utility metrics: commute data (:mod:`.commute`), tabular marginals and pMSE (:mod:`.tabular`),
classifiers and the distinguishing game (:mod:`.classifiers`)."""
