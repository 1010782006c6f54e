"""The data owner's gRPC server, one room per product over shared plumbing:

* ``knn``: encrypted k-NN (servicer, key store and warm-up, compiled-model cache, datasets, the
  evaluators that run circuits in process or on a Dask cluster, its command-line flags);
* ``controller``: binding analysis sequences (the pure disclosure logic: analyses, output checking,
  query-set control, session store; its servicer; its flags);
* ``paillier``: the interactive Paillier baseline's servicer;
* ``common``: what every service shares (caller identities, admission slots, interceptors, call log,
  error answers, owner-only secret files).

``main`` is ``petlab-server``: it parses the command line and composes the rooms.
"""
