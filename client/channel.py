"""The gRPC channel every petlab client opens (device, analyst, experiments).

Kept apart from ``client.knn_client`` so that tools which never encrypt (``petlab-analyst``) do not
import concrete-python, and with it setuptools' ``pkg_resources`` warning, on every call.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from petlab.client.bearer import with_token
from petlab.protos.message_limits import CHANNEL_OPTIONS


def make_channel(
    address: str,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    token: str | None = None,
) -> grpc.Channel:
    """A channel to ``address``: TLS when a CA or client certificate is given, and the bearer
    ``token`` on every call when given (``client.bearer``)."""
    options = list(CHANNEL_OPTIONS)
    if tls_ca or tls_cert:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=tls_ca.read_bytes() if tls_ca else None,
            private_key=tls_key.read_bytes() if tls_key else None,
            certificate_chain=tls_cert.read_bytes() if tls_cert else None,
        )
        return with_token(grpc.secure_channel(address, credentials, options), token)
    return with_token(grpc.insecure_channel(address, options), token)
