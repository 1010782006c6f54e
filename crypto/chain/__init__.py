"""Binding analysis sequences (Domingo-Ferrer, PSD 2022): fixed-length instructions, hash-chained
traces with the signed first trace and the certification authority's co-signature (``traces``,
``instructions``; the authority's check and co-signature, ``certification``), and the Ed25519
public-key checks they rely on (``ed25519_points``)."""
