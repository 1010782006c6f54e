"""``petlab-server serve``: the flags (``server.flags``) become ``ServerOptions``; the server is built
(``server.app.build_services``), takes its data directory and port, and serves on the main
thread's event loop until SIGTERM or SIGINT. Both signals are taken by a thread of their own and
handed to the loop (``server.common.stop_signals``: concrete's native libraries install handlers of
their own that would end the process at once): the server drains in-flight calls for ``--grace``
seconds and the process exits within ``--grace`` + :data:`EXIT_MARGIN_SECONDS` whatever its peers
do (an evaluation still running then does not keep it), with status 0 after SIGTERM and 130 after
SIGINT (the exit-status table). SIGUSR1 takes the server out of rotation (health NOT_SERVING, calls
still answered) and the next SIGUSR1 puts it back: a signal only the owner of the process can send."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
from typing import NoReturn

from petlab.errors import INTERRUPTED, OK, BadInput
from petlab.server.app import (
    STOP_MARGIN_SECONDS,
    AsyncServer,
    ServerOptions,
    Services,
    build_services,
    lock_directory,
    release_directory,
)
from petlab.server.common import stop_signals
from petlab.server.common.event_loop import keep_grpc_aio
from petlab.server.flags import add_serve_arguments, serve_options

log = logging.getLogger("petlab.server")

EXIT_MARGIN_SECONDS = 5.0  # the promise: gone within --grace + this after SIGTERM or SIGINT
FORCE_MARGIN_SECONDS = 4.0  # when the process ends itself: a second before the promise runs out
EXIT_STATUS = {signal.SIGTERM: OK, signal.SIGINT: INTERRUPTED}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_serve_arguments(parser)


def run(args: argparse.Namespace) -> int:
    # the console script held the stop signals before any thread started (server.main.program);
    # run in a process of its own (a test), the loop's handlers take them once it serves
    taker = stop_signals.SignalTaker(end_while_starting) if stop_signals.held() else None
    try:
        options = serve_options(args)
    except ValueError as exc:  # a bad flag combination: exit status 2
        raise BadInput(str(exc)) from exc
    try:
        options.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = lock_directory(options.data_dir)  # held until the process ends
    except OSError as exc:  # another server has the directory, or it cannot be made: 1
        log.error("%s", exc)
        return 1
    try:
        services = build_services(options)
    except ValueError as exc:  # a bad flag, model name, CSV or bounds file: exit status 2
        release_directory(lock)
        raise BadInput(str(exc)) from exc
    except (OSError, RuntimeError) as exc:  # a directory cannot be made, a cache is shared: 1
        release_directory(lock)
        log.error("%s", exc)
        return 1
    except BaseException:
        release_directory(lock)
        raise
    status = asyncio.run(serve_until_signal(options, services, taker))
    release_directory(lock)
    end_process(status)


def end_while_starting(signum: int) -> None:
    """A signal before the server listens: SIGTERM and SIGINT end the process at once with their
    exit status (nothing to drain yet); SIGUSR1 has no server to put in maintenance."""
    if signum == signal.SIGUSR1:
        log.info("signal %d: not serving yet, ignored", signum)
        return
    log.info("signal %d before the server listens: exiting", signum)
    end_process(EXIT_STATUS[signal.Signals(signum)])


async def serve_until_signal(
    options: ServerOptions, services: Services, taker: stop_signals.SignalTaker | None
) -> int:
    """Serve until SIGTERM or SIGINT (taken by ``taker``), then drain for ``--grace`` seconds; the
    exit status the signal calls for."""
    loop = asyncio.get_running_loop()
    keep_grpc_aio()  # on this loop, before any grpc object (server.common.event_loop)
    server = AsyncServer(options, services)
    try:
        port = await server.start()
    except (OSError, RuntimeError) as exc:  # the port is taken
        log.error("%s", exc)
        return 1
    grace, port_file = options.common.grace, options.common.port_file
    if port_file:
        port_file.write_text(str(port))
    stopping: asyncio.Future[int] = loop.create_future()
    maintenance = [False]

    def stop(signum: int) -> None:
        if not stopping.done():
            log.info("signal %d: draining for up to %.0f s", signum, grace)
            exit_deadline(grace + FORCE_MARGIN_SECONDS, EXIT_STATUS[signal.Signals(signum)])
            stopping.set_result(signum)

    def toggle_maintenance() -> None:
        maintenance[0] = not maintenance[0]
        log.info(
            "signal %d: health %s",
            signal.SIGUSR1,
            "NOT_SERVING (maintenance)" if maintenance[0] else "SERVING",
        )
        server.set_maintenance(maintenance[0])

    def on_signal(signum: int) -> None:  # on the event loop
        toggle_maintenance() if signum == signal.SIGUSR1 else stop(signum)

    if taker is not None:
        taker.reroute(lambda signum: loop.call_soon_threadsafe(on_signal, signum))
    else:
        for held_signal in stop_signals.HELD:
            loop.add_signal_handler(held_signal, on_signal, held_signal)
    signum = await stopping
    await server.stop(grace)
    with contextlib.suppress(TimeoutError):  # the stores commit every change; closing is tidiness
        await asyncio.wait_for(loop.run_in_executor(None, services.close), STOP_MARGIN_SECONDS)
    log.info("stopped")
    return EXIT_STATUS[signal.Signals(signum)]


def end_process(status: int = OK) -> NoReturn:
    """Flush the log and the standard streams and end the process at once with ``status``.
    Python's own teardown is skipped: it would wait for an evaluation still running on a worker
    thread, and the stores are consistent on disk after every write (the key store's index and
    the session database commit each change)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def exit_deadline(seconds: float, status: int) -> None:
    """End the process ``seconds`` from now with ``status`` if it is still running then (a drain
    that never ends, a thread that the interpreter's exit would wait for)."""

    def force() -> None:
        log.warning("still running %.0f s after the stop signal: exiting now", seconds)
        end_process(status)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()
    # the last resort, a thread of C that needs no interpreter lock: if even the timer cannot run
    # (a thread holding the lock inside a C library), every thread's stack goes to stderr and the
    # process ends (status 1) half a second later
    faulthandler.dump_traceback_later(seconds + 0.5, exit=True)
