"""The device's side of the interactive Paillier baseline (``crypto.paillier_knn``): two rounds."""

from __future__ import annotations

import grpc
import numpy as np

from petlab.client.call_stats import CallRecorder, CallStats
from petlab.client.knn_client import quantizer_of
from petlab.crypto.paillier_knn import (
    decrypt_distances,
    encrypt_query,
    from_bytes,
    majority,
    nearest_indices,
    to_bytes,
)
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
