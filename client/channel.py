"""The gRPC channel every petlab client opens (device, analyst, experiments).

Kept apart from ``client.knn_client`` so that tools which never encrypt (``petlab-analyst``) do not
import concrete-python, and with it setuptools' ``pkg_resources`` warning, on every call.

Credentials travel only where nobody else can read them (issue 23): a bearer token (``--token`` or
``PETLAB_TOKEN``) is sent over a plaintext channel only to a loopback address
(``petlab.addresses``), or when the caller says ``insecure_token`` (``--insecure-token``: "send it
anyway; anyone on the path can read it and act as you"); otherwise :func:`make_channel` refuses
before any connection is made. A client certificate and its key go together and always mean TLS:
one without the other is refused rather than silently dropped for a plaintext channel.

A plaintext channel to a loopback address never goes through an HTTP proxy: gRPC honours
``grpc_proxy``, ``https_proxy`` and ``http_proxy`` for every target, loopback included, and tunnels
the connection with ``CONNECT 127.0.0.1:PORT``, so the proxy reads the plaintext HTTP/2 stream, token
included, and connects to *its own* loopback, another machine's server (found by the red team:
``tests/test_identities.py``).
"""

from __future__ import annotations

from pathlib import Path

import grpc

from petlab.addresses import is_loopback_address
from petlab.client.bearer import with_token
from petlab.errors import BadInput
from petlab.protos.message_limits import CHANNEL_OPTIONS


class InsecureCredentials(BadInput, ValueError):
    """A credential would travel where others can read it (the message says how to fix it)."""


def make_channel(
    address: str,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    token: str | None = None,
    insecure_token: bool = False,
) -> grpc.Channel:
    """A channel to ``address``: TLS when a CA or client certificate is given, and the bearer
    ``token`` on every call when given (``client.bearer``); see the module docstring for when it
    refuses (``InsecureCredentials``)."""
    if bool(tls_cert) != bool(tls_key):
        raise InsecureCredentials("--tls-cert and --tls-key go together (a client certificate needs its key)")
    options = list(CHANNEL_OPTIONS)
    if tls_ca or tls_cert:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=tls_ca.read_bytes() if tls_ca else None,
            private_key=tls_key.read_bytes() if tls_key else None,
            certificate_chain=tls_cert.read_bytes() if tls_cert else None,
        )
        return with_token(grpc.secure_channel(address, credentials, options), token)
    if token and not insecure_token and not is_loopback_address(address):
        raise InsecureCredentials(
            f"refusing to send the bearer token in plaintext to {address}: give --tls-ca to use TLS "
            "(or --insecure-token to send it readable by anyone on the path)"
        )
    if is_loopback_address(address):
        options.append(("grpc.enable_http_proxy", 0))  # this machine's server, never a proxy's
    return with_token(grpc.insecure_channel(address, options), token)
