"""Weak Ed25519 keys are refused (issue 14: "small-order Ed25519 public keys are accepted")."""

from __future__ import annotations

import contextlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from petlab.crypto.chain.ed25519_points import P, _add, _decode, check_public_key
from petlab.crypto.chain.traces import load_public_key, public_key_bytes

IDENTITY = (1).to_bytes(32, "little")
ALL_IDENTITY_SIGNATURE = IDENTITY + bytes(32)  # R = identity, S = 0


def _small_order_encodings() -> list[bytes]:
    """Encodings of the points of order 1, 2 and 4 (y = 1, y = -1, y = 0), taken from the curve
    equation rather than a list; the order-8 points are covered by the [8]A = identity test."""
    found = {}
    for y in (1, P - 1, 0):
        for sign in (0, 1):
            raw = (y | (sign << 255)).to_bytes(32, "little")
            with contextlib.suppress(ValueError):
                found[_decode(raw)] = raw
    return list(found.values())


def test_the_all_identity_forgery_works_on_the_identity_key_in_openssl():
    """The attack the check stops: cryptography (OpenSSL) takes the identity as a key, and the
    all-identity signature verifies on any message under it."""
    key = Ed25519PublicKey.from_public_bytes(IDENTITY)
    key.verify(ALL_IDENTITY_SIGNATURE, b"any T_0 at all")  # no exception: a forgery
    with pytest.raises(ValueError, match="small order"):
        load_public_key(IDENTITY)


def test_small_order_and_non_canonical_keys_are_refused():
    weak = _small_order_encodings()
    assert len(weak) >= 3
    for raw in weak:
        with pytest.raises(ValueError):
            check_public_key(raw)
    non_canonical = (P + 1).to_bytes(32, "little")  # y = p + 1, another encoding of y = 1
    with pytest.raises(ValueError, match="non-canonical"):
        check_public_key(non_canonical)


def test_real_keys_pass_and_arithmetic_is_sound():
    for _ in range(20):
        raw = public_key_bytes(Ed25519PrivateKey.generate().public_key())
        check_public_key(raw)
        load_public_key(raw)
    base = _decode(bytes.fromhex("5866666666666666666666666666666666666666666666666666666666666666"))
    assert _add(base, (0, 1)) == base  # the identity is neutral
