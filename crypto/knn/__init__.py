"""Encrypted k-NN: the data owner's model (``model``: quantization, training-point choice, plan),
the circuit families and their registry (``families``; one subpackage each: ``thermo``, ``fast``,
``paper``), their shared settings (``config``, ``ranges``) and the client/server split over bytes
(``deployment``)."""
