"""The random source of every release path (OnTheMap sampling, plausible deniability's seeds and
resampling, adaptive synthesis).

:func:`release_generator` without a seed is a numpy ``Generator`` over ChaCha20 (randomgen's
``ChaCha`` with the standard 20 rounds), keyed with 256 bits from the operating system's
``os.urandom``: a cryptographically secure stream, so nobody who sees part of a release (or of
several) can predict or reconstruct the rest of the randomness, as they could for numpy's default
PCG64, whose state follows from a few outputs. With a seed it is numpy's PCG64: reproducible, for
tests and experiments only, and the CLIs print "NOT for release" for seeded runs.

The samplers themselves (gamma, binomial, multinomial, permutations) are numpy's, fed with these
bits. Additive noise on counts is a different matter (the floating-point Laplace attack): it comes
from OpenDP's exact samplers (``petlab.plaindata.dp.noise``), never from this generator.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
from randomgen import ChaCha

CHACHA_ROUNDS = 20


def release_generator(seed: int | None = None) -> np.random.Generator:
    """A secure generator (``seed`` None) or a reproducible one (module docstring)."""
    if seed is None:
        return np.random.Generator(ChaCha(key=int.from_bytes(os.urandom(32), "big"), rounds=CHACHA_ROUNDS))
    return np.random.default_rng(seed)


def is_secure(rng: np.random.Generator) -> bool:
    """Whether ``rng`` draws from the secure stream of :func:`release_generator`."""
    return isinstance(rng.bit_generator, ChaCha)


def partition_generator(root: int, part: int, secure: bool) -> np.random.Generator:
    """The generator of partition ``part`` of a release split across processes: independent
    streams from one ``root``. Secure: ChaCha20 keyed with SHA-256(root, part), ``root`` 256 bits
    from the OS. Otherwise (a seeded, reproducible run): PCG64 from ``SeedSequence(root,
    spawn_key=(part,))``."""
    if secure:
        material = root.to_bytes(32, "big") + part.to_bytes(8, "big")
        key = int.from_bytes(hashlib.sha256(b"petlab/partition-key:" + material).digest(), "big")
        return np.random.Generator(ChaCha(key=key, rounds=CHACHA_ROUNDS))
    return np.random.default_rng(np.random.SeedSequence(root, spawn_key=(part,)))
