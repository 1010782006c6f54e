"""The latency model a device's wait is compared with: rounds x RTT + bytes / bandwidth + compute.

For one run of ``petlab-client`` (a sequence of calls on one connection):

    model = keygen + sum over calls of compute(call)
            + (calls + HANDSHAKE_ROUNDS) x RTT + bytes up / uplink rate + bytes down / downlink rate

* ``compute(call)`` is the same call's seconds on unshaped loopback (the device's serialisation, the
  server's work, loopback's own transfer), measured in the same experiment;
* each call is one request and one reply: one round trip;
* a new connection costs ``HANDSHAKE_ROUNDS`` = 2 round trips before the first request leaves: TCP's
  handshake, then gRPC waits for the server's HTTP/2 SETTINGS frame, which the server sends once it
  has accepted the connection (measured: a connection's first call, ``ListModels``, takes 3 RTT over
  the relay at 300 ms, and every later call 1);
* the bytes are what crossed the link (``experiments.link_relay`` counts TCP payload: protobuf
  messages with their HTTP/2 framing and headers).

For one query on a connection kept open (``query`` below), the rounds are the protocol's: 1 for the
encrypted k-NN (``Classify``), 2 for the Paillier baseline (``Distances``, then ``Labels``).

:func:`crossover_rtt` solves ``a + ra x RTT = b + rb x RTT``: the round-trip time beyond which the
protocol with fewer rounds answers first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from petlab.experiments.link_relay import LinkProfile

HANDSHAKE_ROUNDS = 2
QUERY_METHODS = {"Classify", "ClassifyBatch", "Distances", "Labels"}
SETUP_METHODS = {"ListModels", "GetClientSpecs"}
UPLOAD_METHODS = {"RegisterKeys"}


@dataclass(frozen=True)
class Call:
    """One call as the device's ``--stats-json`` records it (payload bytes, seconds)."""

    method: str
    seconds: float
    bytes_sent: int
    bytes_received: int


def rounds(calls: Iterable[Call], new_connection: bool = True) -> int:
    """Round trips of a sequence of calls: one per call, plus the handshake of a new connection."""
    count = sum(1 for _ in calls)
    return count + (HANDSHAKE_ROUNDS if new_connection and count else 0)


def transfer_seconds(up_bytes: float, down_bytes: float, profile: LinkProfile) -> float:
    """Seconds to push ``up_bytes`` and ``down_bytes`` through the link, each at its direction's rate."""
    return up_bytes / profile.up_bytes_per_s + down_bytes / profile.down_bytes_per_s


def model_seconds(
    round_trips: int, up_bytes: float, down_bytes: float, compute_s: float, profile: LinkProfile
) -> float:
    """rounds x RTT + bytes / bandwidth (each way) + compute."""
    return round_trips * profile.rtt_s + transfer_seconds(up_bytes, down_bytes, profile) + compute_s


def compute_seconds(calls: Iterable[Call], compute: Mapping[str, float]) -> float:
    """The calls' compute: each method's seconds on unshaped loopback (``KeyError`` for a method
    the baseline never saw: the model has nothing to say about it)."""
    return sum(compute[c.method] for c in calls)


def run_model(
    calls: list[Call],
    compute: Mapping[str, float],
    keygen_s: float,
    wire_up: int,
    wire_down: int,
    profile: LinkProfile,
) -> float:
    """The model of a whole ``petlab-client`` run on a new connection (module docstring)."""
    return keygen_s + model_seconds(
        rounds(calls), wire_up, wire_down, compute_seconds(calls, compute), profile
    )


def query_model(calls: list[Call], compute: Mapping[str, float], profile: LinkProfile) -> float:
    """The model of one query's calls on an open connection (payload bytes; no handshake)."""
    query = [c for c in calls if c.method in QUERY_METHODS]
    return model_seconds(
        rounds(query, new_connection=False),
        sum(c.bytes_sent for c in query),
        sum(c.bytes_received for c in query),
        compute_seconds(query, compute),
        profile,
    )


def crossover_rtt(a_fixed_s: float, a_rounds: int, b_fixed_s: float, b_rounds: int) -> float | None:
    """The RTT (seconds) at which ``a_fixed_s + a_rounds x RTT`` equals ``b_fixed_s + b_rounds x RTT``;
    None when the lines do not cross at a positive RTT (same rounds, or one is faster everywhere)."""
    if a_rounds == b_rounds:
        return None
    rtt = (b_fixed_s - a_fixed_s) / (a_rounds - b_rounds)
    return rtt if rtt > 0 else None
