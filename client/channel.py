"""The gRPC channel every petlab client opens (device, analyst, experiments).

Kept apart from ``client.knn_client`` so that tools which never encrypt (``petlab-analyst``) do not
import concrete-python, and with it setuptools' ``pkg_resources`` warning, on every call.

Credentials travel only where nobody else can read them: a bearer token (``--token`` or
``PETLAB_TOKEN``) is sent over a plaintext channel only to a loopback address
(``petlab.addresses``), or when the caller says ``insecure_token`` (``--insecure-token``: "send it
anyway; anyone on the path can read it and act as you"); otherwise :func:`make_channel` refuses
before any connection is made. A client certificate and its key go together and always mean TLS:
one without the other is refused rather than silently dropped for a plaintext channel.

The token travels as the ``authorization: Bearer <token>`` header of every call, added by an
interceptor (:class:`_BearerToken`) on a channel with TLS credentials, or, to a loopback address,
with gRPC's local credentials (``local_channel_credentials``), which gRPC itself refuses to use
towards a peer that is not on this machine; ``insecure_token`` alone puts it on a plaintext
channel. Not gRPC's ``access_token_call_credentials``: that is a plugin in Python which gRPC's
native threads call back into, the interpreter's lock in hand, and a process that also stops an
in-process server (the tests, the experiments) could deadlock on it (grpc/grpc#42247).

A plaintext channel to a loopback address never goes through an HTTP proxy: gRPC honours
``grpc_proxy``, ``https_proxy`` and ``http_proxy`` for every target, loopback included, and tunnels
the connection with ``CONNECT 127.0.0.1:PORT``, so the proxy reads the plaintext HTTP/2 stream, token
included, and connects to *its own* loopback, another machine's server
(``tests/server/knn/test_identities.py``).
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import grpc

from petlab.addresses import is_loopback_address, with_default_port
from petlab.errors import BadInput, MissingFile, Unavailable
from petlab.protos.message_limits import CHANNEL_OPTIONS

TOKEN_PATTERN = re.compile(r"[\x21-\x7e]{1,512}")


class InsecureCredentials(BadInput, ValueError):
    """A credential would travel where others can read it (the message says how to fix it)."""


class MalformedToken(BadInput, ValueError):
    """The bearer token is not printable ASCII without spaces (the message never quotes it)."""


def make_channel(
    address: str,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    token: str | None = None,
    insecure_token: bool = False,
) -> grpc.Channel:
    """A channel to ``address``: TLS when a CA or client certificate is given, and the bearer
    ``token`` on every call when given; see the module docstring for when it refuses
    (``InsecureCredentials``)."""
    if bool(tls_cert) != bool(tls_key):
        raise InsecureCredentials("--tls-cert and --tls-key go together (a client certificate needs its key)")
    if token is not None and not TOKEN_PATTERN.fullmatch(token):
        raise MalformedToken("a token is printable ASCII without spaces (at most 512 characters)")
    for flag, path in (("--tls-ca", tls_ca), ("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not Path(path).is_file():
            raise MissingFile(path, f"{flag} names a PEM file")
    address = with_default_port(address)
    options = list(CHANNEL_OPTIONS)
    if tls_ca or tls_cert:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=tls_ca.read_bytes() if tls_ca else None,
            private_key=tls_key.read_bytes() if tls_key else None,
            certificate_chain=tls_cert.read_bytes() if tls_cert else None,
        )
        return with_token(grpc.secure_channel(address, credentials, options), token)
    loopback = is_loopback_address(address)
    if token and not insecure_token and not loopback:
        raise InsecureCredentials(
            f"refusing to send the bearer token in plaintext to {address}: give --tls-ca to use TLS "
            "(or --insecure-token to send it readable by anyone on the path)"
        )
    if loopback:
        options.append(("grpc.enable_http_proxy", 0))  # this machine's server, never a proxy's
        if token:
            kind = (
                grpc.LocalConnectionType.UDS
                if address.startswith("unix")
                else grpc.LocalConnectionType.LOCAL_TCP
            )
            return with_token(
                grpc.secure_channel(address, grpc.local_channel_credentials(kind), options), token
            )
    return with_token(grpc.insecure_channel(address, options), token)


def with_token(channel: grpc.Channel, token: str | None) -> grpc.Channel:
    """``channel`` with the bearer ``token`` on every call (none: ``channel`` itself)."""
    return grpc.intercept_channel(channel, _BearerToken(token)) if token else channel


# what gRPC's details say when nothing listens at the address, or the name does not resolve
NO_SERVER = ("connection refused", "dns resolution failed", "name or service not known", "no address")


def unavailable(error: BaseException, address: str) -> Unavailable | None:
    """For a call that failed with UNAVAILABLE: an error naming the address tried and what to do
    (start ``petlab-server serve``, or point ``--server`` at a running one), gRPC's reason kept
    at the end; None for any other error."""
    code = getattr(error, "code", None)
    if not isinstance(error, grpc.RpcError) or code is None or code() != grpc.StatusCode.UNAVAILABLE:
        return None
    details = str(error.details() or "")
    address = with_default_port(address)
    lowered = details.lower()
    if "handshake" in lowered or "ssl" in lowered or "tls" in lowered:
        told = (
            f"no TLS connection with {address}: check --tls-ca (and --tls-cert, --tls-key), and that "
            "the server there serves TLS"
        )
    elif any(sign in lowered for sign in NO_SERVER):
        told = (
            f"no server answered at {address}: start one with `petlab-server serve`, or give a "
            "running one's address with --server HOST:PORT"
        )
    else:
        told = f"the server at {address} is unavailable; try again, or check that it is running"
    return Unavailable(f"UNAVAILABLE: {told} (gRPC: {details})")


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """The token's ``authorization`` header on every call (module docstring)."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [item for item in (details.metadata or ()) if item[0] != "authorization"]
        return _CallDetails(
            details.method,
            details.timeout,
            [*metadata, self._header],
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._with_token(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._with_token(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._with_token(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._with_token(client_call_details), request_iterator)
