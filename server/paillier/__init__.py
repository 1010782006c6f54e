"""The interactive Paillier k-NN baseline's servicer (experiments only: it reveals distances and
labels); its protocol is ``crypto.paillier_knn``."""
