"""The interactive Paillier k-NN baseline's servicer (``service``) and its switch (``options``;
experiments only: it reveals distances and labels); its protocol is ``crypto.paillier_knn``."""
