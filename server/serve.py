"""``petlab-server serve``: the flags (``server.flags``) become ``ServerOptions``; the server is built
and started (``server.app``) and runs until SIGTERM or SIGINT, then drains in-flight calls for
``--grace`` seconds and exits within ``--grace`` + :data:`EXIT_MARGIN_SECONDS` whatever its peers
do (a thread still busy then, an evaluation say, does not keep the process; once drained it ends
at once, without Python's teardown). SIGUSR1 takes the server
out of rotation (health NOT_SERVING, calls still answered) and the next SIGUSR1 puts it back: a
signal only the owner of the process can send."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from typing import NoReturn

from petlab.errors import BadInput
from petlab.server.app import start
from petlab.server.flags import add_serve_arguments, serve_options

log = logging.getLogger("petlab.server")

EXIT_MARGIN_SECONDS = 5.0  # the promise: gone within --grace + this after SIGTERM or SIGINT
FORCE_MARGIN_SECONDS = 4.0  # when the process ends itself: a second before the promise runs out


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
    stopping = threading.Event()
    maintenance = threading.Event()

    def shut_down(signum, frame) -> None:
        if stopping.is_set():
            return
        stopping.set()
        log.info("signal %d: draining for up to %.0f s", signum, args.grace)
        exit_deadline(args.grace + FORCE_MARGIN_SECONDS)

        def drain() -> None:
            running.stop(args.grace)
            stopped.set()

        threading.Thread(target=drain, name="petlab-drain", daemon=True).start()

    def toggle_maintenance(signum, frame) -> None:
        down = not maintenance.is_set()
        if down:
            maintenance.set()
        else:
            maintenance.clear()
        log.info("signal %d: health %s", signum, "NOT_SERVING (maintenance)" if down else "SERVING")
        threading.Thread(target=running.set_maintenance, args=(down,), daemon=True).start()

    signal.signal(signal.SIGTERM, shut_down)
    signal.signal(signal.SIGINT, shut_down)
    signal.signal(signal.SIGUSR1, toggle_maintenance)
    stopped.wait()
    log.info("stopped")
    end_process()  # the drain closed everything; the interpreter's own teardown is not waited for


def end_process() -> NoReturn:
    """Flush the log and the standard streams and end the process at once, status 0 (the stop was
    asked for). Python's own teardown is skipped: measured in ``petlab-experiments liveness-stress``
    on a loaded 2-core machine, it kept about one stopped server in twenty running for more than
    5 s after "stopped" (the main thread still busy, the exit timer unable to run)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)


def exit_deadline(seconds: float) -> None:
    """End the process ``seconds`` from now if it is still running then (a drain that never ends,
    a thread that the interpreter's exit would wait for), with status 0: the stop was asked for."""

    def force() -> None:
        log.warning("still running %.0f s after the stop signal: exiting now", seconds)
        end_process()

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()
