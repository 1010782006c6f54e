"""Weak Ed25519 keys are refused: small-order, non-canonical and outside the prime-order subgroup."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from nacl.bindings import crypto_core_ed25519_add

from petlab.crypto.chain.ed25519_points import check_public_key
from petlab.crypto.chain.traces import load_public_key, public_key_bytes

P = 2**255 - 19
IDENTITY = (1).to_bytes(32, "little")
ALL_IDENTITY_SIGNATURE = IDENTITY + bytes(32)  # R = identity, S = 0
# A point of order 8 (y from the curve equation for the order-8 points; the same encoding as in
# libsodium's and Monero's blocklists); the test checks [8]T is the identity.
ORDER_8 = bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")


def _encoding(y: int, sign: int) -> bytes:
    return (y | (sign << 255)).to_bytes(32, "little")


def _doubled(point: bytes, times: int) -> bytes:
    for _ in range(times):
        point = crypto_core_ed25519_add(point, point)
    return point


def test_the_all_identity_forgery_works_on_the_identity_key_in_openssl():
    """The attack the check stops: cryptography (OpenSSL) takes the identity as a key, and the
    all-identity signature verifies on any message under it."""
    key = Ed25519PublicKey.from_public_bytes(IDENTITY)
    key.verify(ALL_IDENTITY_SIGNATURE, b"any T_0 at all")  # no exception: a forgery
    with pytest.raises(ValueError, match="small order"):
        load_public_key(IDENTITY)


def test_small_order_and_non_canonical_keys_are_refused():
    # order 1 (y = 1), 2 (y = -1) and 4 (y = 0), each with both sign bits (x = 0 with the sign bit
    # set is the "negative zero" non-canonical encoding), and the order-8 point
    weak = [_encoding(y, sign) for y in (1, P - 1, 0) for sign in (0, 1)] + [ORDER_8]
    assert _doubled(ORDER_8, 3) == IDENTITY and _doubled(ORDER_8, 2) != IDENTITY
    for raw in weak:
        with pytest.raises(ValueError, match="weak Ed25519 key"):
            check_public_key(raw)
    for y in (P, P + 1, 2**255 - 1):  # y >= p: P + 1 is another encoding of the identity
        with pytest.raises(ValueError, match="non-canonical"):
            check_public_key(_encoding(y, 0))
    with pytest.raises(ValueError, match="32 bytes"):
        check_public_key(IDENTITY[:31])


def test_real_keys_pass_and_their_torsioned_twins_do_not():
    """Honest keys ([a]B) pass; the same key plus a point of order 8 (A + T: no honest signer's key,
    and one under which the small-order part decides whether some signatures verify) is refused."""
    for _ in range(20):
        raw = public_key_bytes(Ed25519PrivateKey.generate().public_key())
        check_public_key(raw)
        load_public_key(raw)
        with pytest.raises(ValueError, match="prime-order subgroup"):
            check_public_key(crypto_core_ed25519_add(raw, ORDER_8))
