"""Interactive Paillier k-NN: the baseline HE-kNN-V is measured against.

The protocol the HE-kNN-V paper sets itself apart from (Ameur et al., PSD 2022, Section 3.3,
"Majority Vote", the scenario "the data owner does the calculation"):

1. The client sends its Paillier public key, E(q_f) for each quantized feature and E(|q|²).
2. The server, additively homomorphically, returns E(d_i) = E(|q|²) · E(|x_i|²) · Π_f E(q_f)^(-2 x_if)
   for every one of its n training points.
3. The client decrypts, sorts (ties broken by the smaller index, as in ``crypto.knn.paper.plan``), and
   asks for the labels of the k nearest indices; it takes the majority (smallest class on ties).

Leakage, stated because it is the point of the comparison: the client learns n, k and every
squared distance from its query to the training points (enough to triangulate them); the server
learns exactly which training indices are the query's nearest neighbours, and with the labels it
returns, the class. Two rounds per query. HE-kNN-V leaks none of this.

Arithmetic is on raw Paillier ciphertexts with g = n + 1 (``phe``'s choice): E(m) for a public
constant m is 1 + m·n mod n², negation is the modular inverse. The client side uses ``phe``.
"""

from __future__ import annotations

import numpy as np
from phe import paillier

from petlab.errors import BadInput

MIN_MODULUS_BITS = 2048


class BadPaillierInput(BadInput, ValueError):
    """A public key, ciphertext or index that the protocol refuses (INVALID_ARGUMENT on the server)."""


def check_public_modulus(modulus: int) -> None:
    if modulus.bit_length() < MIN_MODULUS_BITS:
        raise BadPaillierInput(
            f"the Paillier modulus has {modulus.bit_length()} bits; at least {MIN_MODULUS_BITS} are required"
        )
    if modulus % 2 == 0:
        raise BadPaillierInput("the Paillier modulus must be odd (a product of two large primes)")


def encrypted_distances(
    modulus: int, encrypted_levels: list[int], encrypted_square_norm: int, train: np.ndarray
) -> list[int]:
    """Server side of round 1: E(|x_i - q|²) for every training point, from E(q_f) and E(|q|²)."""
    check_public_modulus(modulus)
    train = np.asarray(train, dtype=np.int64)
    if len(encrypted_levels) != train.shape[1]:
        raise BadPaillierInput(f"expected {train.shape[1]} encrypted features, got {len(encrypted_levels)}")
    square = modulus * modulus
    for value in (*encrypted_levels, encrypted_square_norm):
        if not 0 < value < square:
            raise BadPaillierInput("a ciphertext lies outside [1, n²): it was not made with this public key")
    distances = []
    for point in train:
        cross = 1
        for ciphertext, level in zip(encrypted_levels, point, strict=True):
            if level:
                cross = cross * pow(ciphertext, 2 * int(level), square) % square
        norm = (1 + int((point**2).sum()) * modulus) % square
        try:
            inverse = pow(cross, -1, square)
        except ValueError as exc:  # not invertible: not a ciphertext
            raise BadPaillierInput(str(exc)) from exc
        distances.append(encrypted_square_norm * norm % square * inverse % square)
    return distances


def labels_for(indices: list[int], labels: np.ndarray, max_count: int) -> list[int]:
    """Server side of round 2, with the checks a server can make."""
    if not indices:
        raise BadPaillierInput("ask for at least one index")
    if len(indices) > max_count:
        raise BadPaillierInput(f"at most {max_count} labels may be asked for per query")
    if len(set(indices)) != len(indices):
        raise BadPaillierInput("indices must be distinct")
    if min(indices) < 0 or max(indices) >= len(labels):
        raise BadPaillierInput(f"indices must lie in [0, {len(labels)})")
    return [int(labels[i]) for i in indices]


# ---------------------------------------------------------------- client side


def generate_keypair(
    bits: int = MIN_MODULUS_BITS,
) -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    return paillier.generate_paillier_keypair(n_length=bits)


def encrypt_query(public_key: paillier.PaillierPublicKey, levels: np.ndarray) -> tuple[list[int], int]:
    values = [int(v) for v in np.asarray(levels).ravel()]
    encrypted = [public_key.raw_encrypt(v) for v in values]
    return encrypted, public_key.raw_encrypt(sum(v * v for v in values))


def decrypt_distances(private_key: paillier.PaillierPrivateKey, ciphertexts: list[int]) -> np.ndarray:
    return np.array([private_key.raw_decrypt(c) for c in ciphertexts], dtype=np.int64)


def nearest_indices(distances: np.ndarray, k: int) -> list[int]:
    """The k smallest distances, equal distances ordered by index (stable sort)."""
    return [int(i) for i in np.argsort(distances, kind="stable")[:k]]


def majority(labels: list[int], n_classes: int) -> int:
    """Most frequent label; the smallest class index among equal counts."""
    return int(np.bincount(np.asarray(labels, dtype=np.int64), minlength=n_classes).argmax())


def to_bytes(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def from_bytes(data: bytes) -> int:
    return int.from_bytes(data, "big")
