"""Encrypted k-NN served over gRPC: the servicer (``service``), clients' evaluation keys
(``key_store``, ``key_warmup``), compiled circuits (``model_cache``, ``cache_integrity``), training
data (``datasets``), where evaluations run (``evaluators``: in process or on a Dask cluster,
``cluster_evaluation``), its options and flags (``options``) and what the server builds at start
(``startup``)."""
