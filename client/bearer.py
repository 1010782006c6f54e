"""The client's bearer token: sent as ``authorization: Bearer <token>`` metadata on every call.

A channel interceptor rather than call credentials, so the token also works on the plaintext
loopback channels of local demos (gRPC refuses call credentials on insecure channels). The token
comes from ``--token`` or, better (command lines are visible to other local users),
``PETLAB_TOKEN``.
"""

from __future__ import annotations

import collections
import re

import grpc

TOKEN_PATTERN = re.compile(r"[\x21-\x7e]{1,512}")


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds the token to every call's metadata."""

    def __init__(self, token: str):
        if not TOKEN_PATTERN.fullmatch(token):
            raise ValueError("a token is printable ASCII without spaces (at most 512 characters)")
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


def with_token(channel: grpc.Channel, token: str | None) -> grpc.Channel:
    """``channel`` sending ``token`` on every call (unchanged without a token)."""
    return grpc.intercept_channel(channel, BearerToken(token)) if token else channel
