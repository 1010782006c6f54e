"""``petlab-server serve``: the flags (``server.flags``) become ``ServerOptions``; the server is built
and started (``server.app``) and runs until SIGTERM or SIGINT, then drains in-flight calls for
``--grace`` seconds."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from petlab.errors import BadInput
from petlab.server.app import start
from petlab.server.flags import add_serve_arguments, serve_options

log = logging.getLogger("petlab.server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_serve_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        options = serve_options(args)
        running = start(options)
    except ValueError as exc:  # a bad flag, model name, CSV or bounds file: exit status 2
        raise BadInput(str(exc)) from exc
    except (OSError, RuntimeError) as exc:  # the port is taken, a directory cannot be made: 1
        log.error("%s", exc)
        return 1
    if args.port_file:
        args.port_file.write_text(str(running.port))
    stopped = threading.Event()

    def shut_down(signum, frame) -> None:
        log.info("signal %d: draining for up to %.0f s", signum, args.grace)

        def drain() -> None:
            running.stop(args.grace)
            stopped.set()

        threading.Thread(target=drain, daemon=True).start()

    signal.signal(signal.SIGTERM, shut_down)
    signal.signal(signal.SIGINT, shut_down)
    stopped.wait()
    log.info("stopped")
    return 0
