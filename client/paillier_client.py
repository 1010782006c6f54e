"""The device's side of the interactive Paillier baseline (``crypto.paillier_knn``): two rounds.

Its key pair is made once per server and kept in that server's directory of the device's key cache
(``paillier_keypair.json``, the primes p and q, written owner-only as the TFHE keys are): like the
TFHE keys, one key pair lets the server link the device's queries to each other; a file that cannot
be read as a key pair is replaced by a new one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
from phe import paillier

from petlab.client.call_stats import CallRecorder, CallStats
from petlab.client.knn_client import quantizer_of
from petlab.crypto.paillier_knn import (
    MIN_MODULUS_BITS,
    decrypt_distances,
    encrypt_query,
    from_bytes,
    generate_keypair,
    majority,
    nearest_indices,
    to_bytes,
)
from petlab.owner_only import read_owner_only, write_owner_only
from petlab.protos import knn_pb2, paillier_pb2, paillier_pb2_grpc


def paillier_classify(
    channel,
    info: knn_pb2.ModelInfo,
    features: np.ndarray,
    keypair,
    stats: list[CallStats],
    timeout: float | None = None,
) -> int:
    public_key, private_key = keypair
    levels = quantizer_of(info).transform(np.asarray(features, dtype=float))
    encrypted, square_norm = encrypt_query(public_key, levels)
    stub = paillier_pb2_grpc.PaillierKnnServiceStub(grpc.intercept_channel(channel, CallRecorder(stats)))
    request = paillier_pb2.DistancesRequest(
        model=info.name,
        public_key_n=to_bytes(public_key.n),
        encrypted_levels=[to_bytes(c) for c in encrypted],
        encrypted_square_norm=to_bytes(square_norm),
    )
    reply = stub.Distances(request, timeout=timeout)
    distances = decrypt_distances(private_key, [from_bytes(c) for c in reply.encrypted_distances])
    labels_request = paillier_pb2.LabelsRequest(model=info.name, indices=nearest_indices(distances, reply.k))
    labels = stub.Labels(labels_request, timeout=timeout)
    return majority(list(labels.labels), len(info.class_names))


KEYPAIR_FILE = "paillier_keypair.json"
Keypair = tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]


def cached_keypair(directory: Path, say: Callable[[str], None] = print) -> tuple[Keypair, float]:
    """The key pair kept in ``directory`` (an owner-only directory), or a new one written there;
    with the seconds spent making it (0 when it was read)."""
    path = directory / KEYPAIR_FILE
    if path.is_file():
        try:
            return _keypair(json.loads(read_owner_only(path))), 0.0
        except (ValueError, KeyError, TypeError, ArithmeticError):
            say(f"the cached Paillier key pair in {path} is unreadable; making a new one")
    started = time.perf_counter()
    public_key, private_key = generate_keypair()
    write_owner_only(path, json.dumps({"p": private_key.p, "q": private_key.q}).encode())
    return (public_key, private_key), time.perf_counter() - started


def _keypair(primes: dict) -> Keypair:
    """The key pair of the stored primes; ValueError unless they make a modulus of at least
    ``MIN_MODULUS_BITS`` bits."""
    p, q = int(primes["p"]), int(primes["q"])
    if p < 3 or q < 3 or p == q or (p * q).bit_length() < MIN_MODULUS_BITS:
        raise ValueError("not a Paillier key pair")
    public_key = paillier.PaillierPublicKey(p * q)
    return public_key, paillier.PaillierPrivateKey(public_key, p, q)
