"""What one peer may take of the server's connections, streams and memory: grpc's own limits,
set on the ``grpc.aio`` server, and the process's descriptor limit.

* **Streams per connection** (``grpc.max_concurrent_streams``): advertised in the server's
  SETTINGS, so a peer knows the limit; streams past it are refused by grpc's HTTP/2 layer. A peer
  that opens streams and resets them at once (the HTTP/2 rapid reset attack, CVE-2023-44487) is
  met by grpc's own defences: a reset stream leaves the server's accounting only when the handler
  is gone, so resets still count against the stream limit, and grpc ends a connection that
  resets too many (GOAWAY).
* **Connections** (``grpc.max_allowed_incoming_connections``): past it, a new connection is closed
  at once; with the descriptor limit raised to the hard limit at start (:func:`raise_descriptor_limit`),
  the process keeps descriptors for its own files whatever the peers open.
* **Idle and slow connections**: a connection that has not finished its handshake within
  ``handshake_seconds`` is closed (``grpc.server_handshake_timeout_ms``), one with no call for
  ``idle_seconds`` gets a GOAWAY (``grpc.max_connection_idle_ms``), and every connection is
  renewed after ``age_seconds`` (``grpc.max_connection_age_ms``; calls in flight get the call
  time limit to finish). A peer's pings without data are answered at most a few times before the
  connection is ended (``grpc.http2.max_ping_strikes``).
* **Memory**: a request message is at most ``MAX_MESSAGE_BYTES``, and what is kept for one peer
  is bounded by its streams, its connections and each call's time limit.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

from petlab.protos.message_limits import CHANNEL_OPTIONS

log = logging.getLogger(__name__)

DESCRIPTORS_KEPT = 256  # descriptors the process keeps for its own files beyond the connections


@dataclass(frozen=True)
class ConnectionLimits:
    streams_per_connection: int = 100
    connections: int = 4096
    handshake_seconds: float = 10.0
    idle_seconds: float = 300.0
    age_seconds: float = 3600.0

    def check(self) -> None:
        if self.streams_per_connection < 1 or self.connections < 1:
            raise ValueError("--max-streams-per-connection and --max-connections must be at least 1")
        if min(self.handshake_seconds, self.idle_seconds, self.age_seconds) <= 0:
            raise ValueError("connection time limits must be positive")

    def server_options(self, call_seconds: float) -> list[tuple[str, int]]:
        """grpc's options for these limits (and the message size limits both ends share)."""
        return [
            *CHANNEL_OPTIONS,
            ("grpc.max_concurrent_streams", self.streams_per_connection),
            ("grpc.max_allowed_incoming_connections", self.connections),
            ("grpc.server_handshake_timeout_ms", int(self.handshake_seconds * 1000)),
            ("grpc.max_connection_idle_ms", int(self.idle_seconds * 1000)),
            ("grpc.max_connection_age_ms", int(self.age_seconds * 1000)),
            ("grpc.max_connection_age_grace_ms", int(call_seconds * 1000)),
            ("grpc.http2.max_ping_strikes", 2),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.so_reuseport", 0),  # a second server on a taken port fails to bind
        ]


def raise_descriptor_limit(connections: int) -> int:
    """Raise the soft limit on open descriptors to the hard limit; returns the connections the
    server may accept: ``connections``, or fewer when the hard limit cannot hold them beside
    :data:`DESCRIPTORS_KEPT` of the process's own (logged)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft == resource.RLIM_INFINITY:
        return connections
    room = max(soft - DESCRIPTORS_KEPT, 1)
    if room < connections:
        log.warning(
            "the descriptor limit (%d) holds %d connections beside the server's own files, not %d",
            soft,
            room,
            connections,
        )
        return room
    return connections
