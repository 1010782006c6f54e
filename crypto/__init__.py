"""Pure computation, one room per product: ``knn`` (encrypted k-NN circuit families, model and
deployment over bytes), ``chain`` (hash-chained traces of binding analysis sequences) and
``paillier_knn`` (the interactive Paillier baseline).

No sockets and no files here, except functions whose job is (de)serialising a named artifact.
"""
