"""The server as a whole: its options, their flags and their defaults, in one place.

:class:`CommonOptions` is what every room shares: the address and TLS, the threads of the two
pools, the time limits of every call and connection (``server.common.transport``), the drain on
shutdown and the bearer tokens that name callers (``server.common.callers``). Each field's default
is stated here once; :func:`add_server_arguments` and :func:`add_caller_arguments` make its flags
(``$PETLAB_<FLAG>`` overrides a default, ``server.common.environment``) and
:meth:`CommonOptions.from_args` reads them back.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from petlab.addresses import DEFAULT_PORT, is_loopback_host
from petlab.server.common.environment import add_env_option, add_env_switch
from petlab.server.common.health import SEND_SECONDS
from petlab.server.common.transport import ConnectionLimits

DEFAULT_DATA_DIR = Path("petlab-data")


@dataclass(frozen=True)
class CommonOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    port_file: Path | None = None  # ``petlab-server serve`` writes the bound port here
    workers: int = 4  # threads for the k-NN room's work (evaluations, key checks) and the baseline's
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    allow_insecure: bool = False
    controller_threads: int = 2  # threads for the analysis controller's decisions
    call_seconds: float = 900.0  # server-side time limit of every call (server.common.boundary)
    send_seconds: float = SEND_SECONDS  # a health watcher takes each status within this
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    grace: float = 30.0  # seconds ``petlab-server serve`` drains in-flight calls on shutdown
    tokens: Path | None = None  # bearer tokens file: identifies callers (server.common.callers)

    @property
    def plaintext(self) -> bool:
        return not (self.tls_cert and self.tls_key)

    def check(self) -> None:
        """Refuse a configuration that must not run (``ValueError`` with a sentence for a person)."""
        if self.plaintext and not is_loopback_host(self.host) and not self.allow_insecure:
            raise ValueError(
                f"refusing plaintext on non-loopback address {self.host}: give "
                "--tls-cert and --tls-key (or --allow-insecure, for a trusted network)"
            )
        if self.workers < 1 or self.controller_threads < 1:
            raise ValueError("--workers and --controller-threads must be at least 1")
        self.connections.check()
        if self.call_seconds <= 0 or self.send_seconds <= 0:
            raise ValueError("--call-seconds and --send-seconds must be positive")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CommonOptions:
        """The options of parsed flags; ``ValueError`` for a bad combination."""
        if bool(args.tls_cert) != bool(args.tls_key):
            raise ValueError("--tls-cert and --tls-key go together")
        return cls(
            host=args.host,
            port=args.port,
            port_file=args.port_file,
            workers=args.workers,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            tls_client_ca=args.tls_client_ca,
            allow_insecure=args.allow_insecure,
            controller_threads=args.controller_threads,
            call_seconds=args.call_seconds,
            send_seconds=args.send_seconds,
            connections=ConnectionLimits(
                streams_per_connection=args.max_streams_per_connection,
                connections=args.max_connections,
                handshake_seconds=args.handshake_seconds,
                idle_seconds=args.connection_idle_seconds,
                age_seconds=args.connection_age_seconds,
            ),
            grace=args.grace,
            tokens=args.tokens,
        )


def add_server_arguments(group: argparse._ActionsContainer) -> None:
    """Address, data directory, TLS, threads and time limits (the defaults of :class:`CommonOptions`)."""
    default = CommonOptions()
    add_env_option(group, "--host", str, default.host, "address to listen on")
    add_env_option(group, "--port", int, default.port, "port; 0 picks a free one")
    add_env_option(group, "--port-file", Path, default.port_file, "write the bound port here once serving")
    add_env_option(
        group, "--data-dir", Path, DEFAULT_DATA_DIR, "compiled models, registered keys, controller sessions"
    )
    add_env_option(
        group,
        "--workers",
        int,
        default.workers,
        "threads for the k-NN room's work (evaluations, key checks and storage) and the Paillier "
        "baseline; a call waiting on its peer holds none",
    )
    add_env_option(
        group, "--tls-cert", Path, default.tls_cert, "the server's certificate (PEM), with --tls-key"
    )
    add_env_option(group, "--tls-key", Path, default.tls_key, "the server's private key (PEM)")
    add_env_option(
        group,
        "--tls-client-ca",
        Path,
        default.tls_client_ca,
        "require client certificates signed by this CA (mutual TLS)",
    )
    add_env_switch(group, "--allow-insecure", "plaintext on a non-loopback address")
    add_env_option(
        group,
        "--controller-threads",
        int,
        default.controller_threads,
        "threads for the analysis controller's decisions",
    )
    add_env_option(
        group,
        "--call-seconds",
        float,
        default.call_seconds,
        "server-side time limit of every call, health watches included; a call still running is "
        "cancelled (it must cover the slowest key upload you accept)",
    )
    add_env_option(
        group,
        "--send-seconds",
        float,
        default.send_seconds,
        "a health watcher that has not taken one status this long is dropped",
    )
    _add_connection_arguments(group, default.connections)
    add_env_option(group, "--grace", float, default.grace, "seconds to drain in-flight calls on shutdown")


def _add_connection_arguments(group: argparse._ActionsContainer, default: ConnectionLimits) -> None:
    """The flags of :class:`~petlab.server.common.transport.ConnectionLimits`."""
    add_env_option(
        group,
        "--max-streams-per-connection",
        int,
        default.streams_per_connection,
        "concurrent calls on one connection, advertised to peers (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)",
    )
    add_env_option(
        group,
        "--max-connections",
        int,
        default.connections,
        "connections held at once; more are closed as they arrive (lowered to fit the descriptor limit)",
    )
    add_env_option(
        group,
        "--handshake-seconds",
        float,
        default.handshake_seconds,
        "a connection that has not finished its TLS/HTTP/2 handshake this long is closed",
    )
    add_env_option(
        group,
        "--connection-idle-seconds",
        float,
        default.idle_seconds,
        "a connection with no call this long is closed (GOAWAY)",
    )
    add_env_option(
        group,
        "--connection-age-seconds",
        float,
        default.age_seconds,
        "connections are renewed after this long (GOAWAY; calls in flight get --call-seconds to end)",
    )


def add_caller_arguments(group: argparse._ActionsContainer) -> None:
    """``--tokens FILE``: bearer tokens, lines ``owner-name token`` (owner-only file; see
    :mod:`petlab.server.common.callers`). Every k-NN call must then carry a valid token. With
    ``--tls-client-ca`` (mutual TLS) and no tokens, the client certificate names the owner; with
    neither, callers are anonymous and only the store-wide limits apply."""
    add_env_option(
        group,
        "--tokens",
        Path,
        CommonOptions.tokens,
        "bearer tokens, lines 'owner-name token', file mode 600: every k-NN call must carry "
        "'authorization: Bearer <token>'; keys and quotas are per owner",
    )
