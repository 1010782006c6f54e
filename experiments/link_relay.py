"""An emulated network link on this machine: a TCP relay on loopback that gives each direction a
bandwidth and a one-way delay, and a check of the link against its profile.

Why a relay and not the kernel: shaping with the kernel needs a network namespace and ``tc``'s
``netem`` queueing discipline for the delay; :func:`kernel_shaping` says what this machine has
(``tbf`` and ``htb`` rate-limit but cannot delay). Where ``netem`` is missing, as on the machine the
committed results come from, the relay is the only way to give a link its round-trip time, so every
profile runs through the relay (one code path, checked by :func:`check_link`).

The link model (per direction): the link is a pipe of ``rate`` bytes per second followed by a
propagation delay of half the round-trip time. A chunk read from the sender starts on the wire when
the previous chunk has left (or now, whichever is later), takes ``len / rate`` seconds to transmit,
and is delivered ``rtt / 2`` after its last byte was transmitted. A message of ``S`` bytes sent on
an idle link therefore arrives ``S / rate + rtt / 2`` after it was sent, which is the term the
latency model uses (``experiments.link_model``). The connection's set-up is TCP's three-way
handshake: the client's first byte leaves no earlier than one round trip after it connected, the
server's first byte no earlier than one and a half round trips (so it arrives two round trips after
the connect, as over a real path). Not emulated: TCP's slow start and per-packet headers (the
relay's loopback sockets run their own TCP), loss and jitter.

The bytes each way are counted per connection (TCP payload: gRPC's HTTP/2 frames and headers
included). Threads and ``time.sleep`` (not asyncio, whose timers round up to milliseconds) keep the
delay accurate to a fraction of a millisecond, which the data-centre profile's 0.5 ms needs.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field

MBIT = 1e6 / 8  # bytes per second in one Mbit/s


@dataclass(frozen=True)
class LinkProfile:
    """A link: ``up_mbit`` from device to server, ``down_mbit`` back, and the round-trip time."""

    name: str
    up_mbit: float
    down_mbit: float
    rtt_ms: float
    stands_for: str = ""

    @property
    def up_bytes_per_s(self) -> float:
        return self.up_mbit * MBIT

    @property
    def down_bytes_per_s(self) -> float:
        return self.down_mbit * MBIT

    @property
    def rtt_s(self) -> float:
        return self.rtt_ms / 1000

    def with_rtt(self, rtt_ms: float) -> LinkProfile:
        return LinkProfile(f"{self.name}@{rtt_ms:g}ms", self.up_mbit, self.down_mbit, rtt_ms, self.stands_for)


PROFILES = (
    LinkProfile("data-centre", 1000, 1000, 0.5, "a service in the data owner's data centre (1 Gbit/s LAN)"),
    LinkProfile("home", 20, 100, 20, "a laptop on home broadband (cable or fibre, 20 up / 100 down)"),
    LinkProfile("mobile", 5, 20, 60, "a phone on a mobile network (4G, fair signal: a slow uplink)"),
)


def kernel_shaping() -> str:
    """What this machine offers for shaping in the kernel, tried in a throw-away network namespace
    (root only; nothing outside the namespace is touched): one line for the results."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        return "not tried (needs root, ip and tc)"
    name = f"petlab-probe-{os.getpid()}"

    def run(*command: str) -> bool:
        return subprocess.run(command, capture_output=True, timeout=10).returncode == 0

    if not run("ip", "netns", "add", name):
        return "network namespaces unavailable"
    try:
        run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        found = []
        for kind, extra in (
            ("netem", ("delay", "1ms")),
            ("tbf", ("rate", "1mbit", "burst", "32kbit", "latency", "50ms")),
            ("htb", ()),
        ):
            if run("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", kind, *extra):
                found.append(kind)
                run("ip", "netns", "exec", name, "tc", "qdisc", "del", "dev", "lo", "root")
        missing = [k for k in ("netem", "tbf", "htb") if k not in found]
        return f"namespace + tc: {', '.join(found) or 'no qdisc'} available" + (
            f", {', '.join(missing)} missing" if missing else ""
        )
    finally:
        run("ip", "netns", "del", name)


@dataclass
class Connection:
    """One relayed connection: when it opened and the bytes each way so far."""

    opened: float
    up_bytes: int = 0
    down_bytes: int = 0


@dataclass
class LinkRelay:
    """Listens on ``127.0.0.1`` (:attr:`port`) and relays each connection to ``target`` through the
    link of :attr:`profile` (read when a connection opens; change it between runs)."""

    target: tuple[str, int]
    profile: LinkProfile
    connections: list[Connection] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="link-accept", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def totals(self) -> tuple[int, int, int]:
        """Connections, bytes up and bytes down since :meth:`reset`."""
        with self._lock:
            return (
                len(self.connections),
                sum(c.up_bytes for c in self.connections),
                sum(c.down_bytes for c in self.connections),
            )

    def reset(self) -> None:
        with self._lock:
            self.connections = []

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def __enter__(self) -> LinkRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                device, _ = self._listener.accept()
            except OSError:
                return
            opened = time.monotonic()
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                device.close()
                continue
            for sock in (device, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            record = Connection(opened)
            with self._lock:
                self.connections.append(record)
            profile, rtt = self.profile, self.profile.rtt_s
            ends = [0]
            for source, sink, rate, not_before, up in (
                (device, server, profile.up_bytes_per_s, opened + rtt, True),
                (server, device, profile.down_bytes_per_s, opened + 1.5 * rtt, False),
            ):
                _Direction(source, sink, rate, rtt / 2, not_before, record, up, self._lock, ends).start()


class _Direction:
    """One direction of one connection: a reader thread that timestamps chunks by the link model,
    a writer thread that delivers each at its time."""

    def __init__(self, source, sink, rate, delay, not_before, record, up, lock, ends) -> None:
        self.source, self.sink, self.rate, self.delay = source, sink, rate, delay
        self.not_before, self.record, self.up, self.lock, self.ends = not_before, record, up, lock, ends
        self.chunk = int(min(256 * 1024, max(1024, rate * 0.002)))  # about 2 ms of the link a read
        self.ahead = max(0.05, 4 * self.chunk / rate)  # read at most this far ahead of the wire
        self.queue: queue.Queue[tuple[float, bytes | None]] = queue.Queue()

    def start(self) -> None:
        threading.Thread(target=self._read, name="link-read", daemon=True).start()
        threading.Thread(target=self._write, name="link-write", daemon=True).start()

    def _read(self) -> None:
        free = self.not_before  # when the wire is free for the next chunk
        while True:
            try:
                data = self.source.recv(self.chunk)
            except OSError:
                data = b""
            now = time.monotonic()
            if not data:
                self.queue.put((max(now, free) + self.delay, None))
                return
            free = max(now, free) + len(data) / self.rate
            self.queue.put((free + self.delay, data))
            if free - now > self.ahead:
                time.sleep(free - now - self.ahead)

    def _write(self) -> None:
        while True:
            at, data = self.queue.get()
            wait = at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if data is None:
                break
            try:
                self.sink.sendall(data)
            except OSError:
                break
            with self.lock:
                if self.up:
                    self.record.up_bytes += len(data)
                else:
                    self.record.down_bytes += len(data)
        with contextlib.suppress(OSError):
            self.sink.shutdown(socket.SHUT_WR)
        with self.lock:
            self.ends[0] += 1
            both = self.ends[0] == 2
        if both:
            for sock in (self.source, self.sink):
                with contextlib.suppress(OSError):
                    sock.close()


# ---------------------------------------------------------------- checking a link against its profile


@dataclass(frozen=True)
class LinkCheck:
    """What the link measured: the shortest and the median round trip (ms; a loaded machine can only
    add to a round trip, so the shortest is the link's), throughput each way (Mbit/s)."""

    profile: LinkProfile
    rtt_ms: float
    rtt_median_ms: float
    up_mbit: float
    down_mbit: float
    setup_ms: float  # connect to the first reply of a fresh connection

    def within(self, rate_tolerance: float, rtt_tolerance_ms: float) -> bool:
        """Throughput each way within ``rate_tolerance`` (a fraction) of the profile's, and the
        round trip no shorter than the profile's and at most ``rtt_tolerance_ms`` longer."""
        p = self.profile
        return (
            abs(self.up_mbit / p.up_mbit - 1) <= rate_tolerance
            and abs(self.down_mbit / p.down_mbit - 1) <= rate_tolerance
            and p.rtt_ms - 0.05 <= self.rtt_ms <= p.rtt_ms + rtt_tolerance_ms
        )


def _receive_exactly(sock: socket.socket, size: int) -> None:
    left = size
    while left:
        data = sock.recv(min(left, 1 << 20))
        if not data:
            raise ConnectionError("the link closed early")
        left -= len(data)


def _serve_probe(listener: socket.socket) -> None:
    """The far end of :func:`check_link`: per command, ``p`` is answered with one byte, ``u`` plus
    an 8-byte size with one byte once that many bytes have arrived, ``d`` plus a size with that many
    bytes."""
    try:
        peer, _ = listener.accept()
    except OSError:
        return
    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with peer:
        while True:
            command = peer.recv(1)
            if not command:
                return
            if command == b"p":
                peer.sendall(b"!")
                continue
            header = b""
            while len(header) < 8:
                header += peer.recv(8 - len(header))
            size = int.from_bytes(header, "big")
            if command == b"u":
                _receive_exactly(peer, size)
                peer.sendall(b"!")
            else:
                peer.sendall(bytes(size))


def check_link(profile: LinkProfile, seconds: float = 0.25, pings: int = 7, transfers: int = 2) -> LinkCheck:
    """Measure a :class:`LinkRelay` of ``profile`` end to end: a fresh connection's set-up,
    ``pings`` one-byte round trips, and throughput each way: the best of ``transfers`` transfers of
    about ``seconds`` of the link, each timed less the shortest round trip (a busy machine can only
    delay a transfer: the relay never delivers faster than the profile's rate)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        threading.Thread(target=_serve_probe, args=(listener,), daemon=True).start()
        with LinkRelay(listener.getsockname(), profile) as relay:
            began = time.monotonic()
            with socket.create_connection(("127.0.0.1", relay.port), timeout=60) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.sendall(b"p")
                _receive_exactly(sock, 1)
                setup = time.monotonic() - began
                rtts = []
                for _ in range(pings):
                    began = time.monotonic()
                    sock.sendall(b"p")
                    _receive_exactly(sock, 1)
                    rtts.append(time.monotonic() - began)
                rtt = min(rtts)
                rates = []
                for command, rate in ((b"u", profile.up_bytes_per_s), (b"d", profile.down_bytes_per_s)):
                    size = int(min(64 << 20, max(64 << 10, rate * seconds)))
                    best = 0.0
                    for _ in range(transfers):
                        began = time.monotonic()
                        sock.sendall(command + size.to_bytes(8, "big"))
                        if command == b"u":
                            sock.sendall(bytes(size))
                            _receive_exactly(sock, 1)
                        else:
                            _receive_exactly(sock, size)
                        elapsed = time.monotonic() - began
                        best = max(best, size / max(elapsed - rtt, 1e-9) / MBIT)
                    rates.append(best)
    return LinkCheck(profile, rtt * 1000, statistics.median(rtts) * 1000, rates[0], rates[1], setup * 1000)
