"""The data owner's gRPC server, one room per product over shared plumbing:

* ``knn``: encrypted k-NN (servicer, key store and warm-up, compiled-model cache, datasets, the
  evaluators that run circuits in process or on a Dask cluster, its options and flags);
* ``controller``: binding analysis sequences (the pure disclosure logic: analyses, output checking,
  query-set control, session store; its servicer; its options and flags);
* ``paillier``: the interactive Paillier baseline's servicer and its switch;
* ``common``: what every service shares (the server's own options, caller identities, admission
  slots, the interceptor, call log, domain errors and their statuses).

``main`` is ``petlab-server``; ``flags`` places each room's flags, ``app`` composes the rooms.
"""
