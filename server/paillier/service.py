"""gRPC servicer for the interactive Paillier k-NN baseline (``crypto.paillier_knn``).

It serves the same selected, quantized training points as the encrypted model of the same name, so
its answers can be compared with the clear reference. Its leakage is documented in
``crypto.paillier_knn``: it exists to be measured against. A request the protocol refuses raises
``BadPaillierInput`` (INVALID_ARGUMENT, answered by the server's boundary interceptor).
"""

from __future__ import annotations

from petlab.crypto.knn.model import KnnModel
from petlab.crypto.paillier_knn import encrypted_distances, from_bytes, labels_for, to_bytes
from petlab.protos import paillier_pb2, paillier_pb2_grpc
from petlab.server.common.callers import CallerIdentities
from petlab.server.common.rpc_errors import InvalidRequest, model_named

MAX_CIPHERTEXT_BYTES = 2048  # a 8192-bit modulus squared


class PaillierServicer(paillier_pb2_grpc.PaillierKnnServiceServicer):
    def __init__(self, models: dict[str, KnnModel], identities: CallerIdentities | None = None):
        """``identities``: when the server names its callers (tokens, client certificates), an
        unidentified call is UNAUTHENTICATED here as on the k-NN service."""
        self._models = models
        self._identities = identities or CallerIdentities()

    def Distances(self, request, context):
        self._identities.owner(context)
        model = model_named(self._models, request.model)
        fields = [request.public_key_n, request.encrypted_square_norm, *request.encrypted_levels]
        if any(not f or len(f) > MAX_CIPHERTEXT_BYTES for f in fields):
            raise InvalidRequest(
                "public key and ciphertexts must be non-empty big-endian integers of at most "
                f"{MAX_CIPHERTEXT_BYTES} bytes"
            )
        distances = encrypted_distances(
            from_bytes(request.public_key_n),
            [from_bytes(c) for c in request.encrypted_levels],
            from_bytes(request.encrypted_square_norm),
            model.plan.train,
        )
        return paillier_pb2.DistancesResponse(
            encrypted_distances=[to_bytes(d) for d in distances], k=model.plan.k
        )

    def Labels(self, request, context):
        self._identities.owner(context)
        model = model_named(self._models, request.model)
        labels = labels_for(list(request.indices), model.plan.labels, model.plan.k)
        return paillier_pb2.LabelsResponse(labels=labels)
