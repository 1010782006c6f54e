"""Refusing weak Ed25519 public keys: non-canonical encodings and points of small order.

A public key A of small order (the identity, or one of the curve's other points of order 2, 4 or
8) lets anyone forge signatures: with R the identity and S = 0, the verification equation
[S]B = R + [k]A holds whenever [k]A is the identity, which for the identity key is every message
(an "all-identity signature verifies"). OpenSSL, behind ``cryptography``, accepts such keys, so
the controller checks them itself (RFC 8032, Section 5.1.3 for decoding): the encoding must be
canonical (y < p, and no "negative zero" x) and [8]A must not be the identity.
"""

from __future__ import annotations

P = 2**255 - 19
D = (-121665 * pow(121666, P - 2, P)) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _decode(encoded: bytes) -> tuple[int, int]:
    """The affine point (x, y) of a 32-byte encoding; ValueError when it is non-canonical or not
    on the curve."""
    if len(encoded) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    value = int.from_bytes(encoded, "little")
    y, sign = value & ((1 << 255) - 1), value >> 255
    if y >= P:
        raise ValueError("non-canonical encoding (y >= p)")
    u, v = (y * y - 1) % P, (D * y * y + 1) % P
    x2 = u * pow(v, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        raise ValueError("not a point on the curve")
    if x == 0 and sign:
        raise ValueError("non-canonical encoding (negative zero)")
    if x % 2 != sign:
        x = P - x
    return x, y


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """Complete twisted Edwards addition for a = -1 (affine)."""
    (x1, y1), (x2, y2) = a, b
    t = D * x1 * x2 * y1 * y2 % P
    x3 = (x1 * y2 + y1 * x2) * pow(1 + t, P - 2, P) % P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P
    return x3, y3


def check_public_key(encoded: bytes) -> None:
    """ValueError unless ``encoded`` is a canonical Ed25519 point that is not of small order."""
    point = _decode(encoded)
    for _ in range(3):
        point = _add(point, point)
    if point == (0, 1):
        raise ValueError("a point of small order (it would accept forged signatures)")
