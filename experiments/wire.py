"""Bytes on the wire, measured: a gRPC channel whose serializers count what they hand to gRPC.

Every stub built on a :class:`ByteCountingChannel` serializes its requests and deserializes its
replies through counting wrappers, so ``sent`` and ``received`` are the lengths of the protobuf
payloads gRPC actually transmitted (HTTP/2 framing and headers excluded). The experiments read
the counters around each call; ``tests/test_experiments.py`` checks them against the serialized
sizes of the same messages.
"""

from __future__ import annotations

import grpc


class ByteCountingChannel(grpc.Channel):
    def __init__(self, inner: grpc.Channel):
        self.inner = inner
        self.sent = 0
        self.received = 0

    def _serializer(self, serialize):
        def counted(message):
            data = serialize(message) if serialize else message
            self.sent += len(data)
            return data

        return counted

    def _deserializer(self, deserialize):
        def counted(data):
            self.received += len(data)
            return deserialize(data) if deserialize else data

        return counted

    def _wrap(self, factory, method, request_serializer, response_deserializer, **kwargs):
        return factory(
            method,
            request_serializer=self._serializer(request_serializer),
            response_deserializer=self._deserializer(response_deserializer),
            **kwargs,
        )

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return self._wrap(self.inner.unary_unary, method, request_serializer, response_deserializer, **kwargs)

    def unary_stream(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return self._wrap(
            self.inner.unary_stream, method, request_serializer, response_deserializer, **kwargs
        )

    def stream_unary(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return self._wrap(
            self.inner.stream_unary, method, request_serializer, response_deserializer, **kwargs
        )

    def stream_stream(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return self._wrap(
            self.inner.stream_stream, method, request_serializer, response_deserializer, **kwargs
        )

    def subscribe(self, callback, try_to_connect=False):
        self.inner.subscribe(callback, try_to_connect)

    def unsubscribe(self, callback):
        self.inner.unsubscribe(callback)

    def close(self):
        self.inner.close()

    def snapshot(self) -> tuple[int, int]:
        return self.sent, self.received
