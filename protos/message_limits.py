"""Limits both ends of every petlab gRPC channel agree on (server and client import them from here).

A compressed evaluation key set is uploaded in chunks below ``MAX_MESSAGE_BYTES``; a batch of
encrypted queries and its results must fit in one message of at most this size either way.
"""

MAX_MESSAGE_BYTES = 8 << 20

CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)
