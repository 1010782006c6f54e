"""Refusing weak Ed25519 public keys: non-canonical encodings, points off the curve, points of small
order and points outside the prime-order subgroup.

A public key A of small order (the identity, or one of the curve's other points of order 2, 4 or
8) lets anyone forge signatures: with R the identity and S = 0, the verification equation
[S]B = R + [k]A holds whenever [k]A is the identity, which for the identity key is every message
(an "all-identity signature verifies"). OpenSSL, behind ``cryptography``, accepts such keys, so
the controller checks them with libsodium (through PyNaCl): ``crypto_core_ed25519_is_valid_point``
accepts only a canonical encoding (RFC 8032, Section 5.1.3) of a point on the curve, of the
prime-order subgroup and not of small order. Every honest key ([a]B for the base point B) is such a
point.
"""

from __future__ import annotations

from nacl.bindings import crypto_core_ed25519_is_valid_point


def check_public_key(encoded: bytes) -> None:
    """ValueError unless ``encoded`` is the canonical encoding of an Ed25519 point of the
    prime-order subgroup (so not of small order)."""
    if len(encoded) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    if not crypto_core_ed25519_is_valid_point(bytes(encoded)):
        raise ValueError(
            "a weak Ed25519 key: a non-canonical encoding, a point off the curve or outside its "
            "prime-order subgroup, or a point of small order (it would accept forged signatures)"
        )
