"""``petlab-server serve`` flags of the server as a whole: address, TLS, threads and time limits.
Each room adds its own (``server.knn.flags``, ``server.controller.flags``,
``server.common.caller_flags``); :func:`serve_options` composes them into ``ServerOptions``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from petlab.server.app import ServerOptions
from petlab.server.common.caller_flags import add_identity_arguments, caller_options
from petlab.server.common.environment import add_env_option, add_env_switch
from petlab.server.common.streams import StreamLimits
from petlab.server.controller.flags import add_analysis_arguments, analysis_options
from petlab.server.knn.flags import add_knn_arguments, knn_options


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Every ``serve`` flag, in one argument group per room (``--help`` shows them apart)."""
    serve = parser.add_argument_group("server: address, TLS, threads and time limits")
    add_env_option(serve, "--host", str, "127.0.0.1", "address to listen on")
    add_env_option(serve, "--port", int, 50051, "port; 0 picks a free one")
    add_env_option(serve, "--port-file", Path, None, "write the bound port here once serving")
    add_env_option(
        serve,
        "--data-dir",
        Path,
        Path("petlab-data"),
        "compiled models, registered keys, controller sessions",
    )
    add_env_option(
        serve,
        "--workers",
        int,
        8,
        "calls doing work at once: k-NN calls take at most this minus --controller-threads (the "
        "pool has a thread for every admitted call)",
    )
    add_env_option(serve, "--max-concurrent-rpcs", int, 32, "calls admitted at once; more are refused")
    add_env_option(serve, "--tls-cert", Path, None, "the server's certificate (PEM), with --tls-key")
    add_env_option(serve, "--tls-key", Path, None, "the server's private key (PEM)")
    add_env_option(
        serve, "--tls-client-ca", Path, None, "require client certificates signed by this CA (mutual TLS)"
    )
    add_env_switch(serve, "--allow-insecure", "plaintext on a non-loopback address")
    add_env_option(
        serve,
        "--controller-threads",
        int,
        2,
        "threads of --workers that k-NN calls never take, kept for the analysis controller (when "
        "--analysis-data is served; else 1 is kept for health checks)",
    )
    add_env_option(
        serve,
        "--call-seconds",
        float,
        900.0,
        "server-side time limit of every call; a call still running is cancelled (it must cover "
        "the slowest key upload you accept)",
    )
    add_env_option(
        serve,
        "--request-seconds",
        float,
        10.0,
        "a call whose request message has not arrived this long after it opened is cancelled",
    )
    add_env_option(
        serve,
        "--stream-slots",
        int,
        8,
        "response streams (health Watch, reflection) open at once; more are refused at once",
    )
    add_env_option(serve, "--stream-seconds", float, 600.0, "a response stream open this long is cancelled")
    add_env_option(
        serve,
        "--stream-idle-seconds",
        float,
        60.0,
        "a stream that reads requests (reflection) and gets none this long is cancelled",
    )
    add_env_option(
        serve,
        "--send-seconds",
        float,
        5.0,
        "a response stream (health Watch, reflection) whose peer has not taken one message this long "
        "is cancelled",
    )
    add_env_option(serve, "--grace", float, 30.0, "seconds to drain in-flight calls on shutdown")
    add_knn_arguments(parser.add_argument_group("encrypted k-NN models"))
    add_analysis_arguments(parser.add_argument_group("analysis controller"))
    add_identity_arguments(parser.add_argument_group("callers: bearer tokens and per-owner quotas"))


def serve_options(args: argparse.Namespace) -> ServerOptions:
    """``ServerOptions`` from parsed flags; ``ValueError`` for a bad combination."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    server: dict[str, Any] = {
        "data_dir": args.data_dir,
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "max_concurrent_rpcs": args.max_concurrent_rpcs,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_client_ca": args.tls_client_ca,
        "allow_insecure": args.allow_insecure,
        "controller_threads": args.controller_threads,
        "call_seconds": args.call_seconds,
        "request_seconds": args.request_seconds,
        "streams": StreamLimits(args.stream_slots, args.stream_idle_seconds, args.stream_seconds),
        "send_seconds": args.send_seconds,
    }
    return ServerOptions(**server, **knn_options(args), **analysis_options(args), **caller_options(args))
