"""Encrypted k-NN: the data owner's model (``model``: quantization, training-point choice, plan),
the circuit families behind one registry (``families``; one subpackage each: ``fast``, ``paper``),
their shared settings (``config``, ``ranges``) and the client/server split over bytes
(``deployment``)."""
