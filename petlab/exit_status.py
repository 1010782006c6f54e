"""Exit statuses that survive concrete's runtime.

Once concrete-python 2.11 has run a circuit in a process (its dataflow runtime, HPX, starts then,
or at ``init_dfr``), the process exits with status 0 whatever Python asked for: ``sys.exit(2)``, an
uncaught exception, pytest's status after a failed test. Measured: a script that runs one circuit
and calls ``sys.exit(3)`` exits 0; ``os._exit(3)`` exits 3. A command-line program that failed
would tell its caller (a shell, CI, ``make``) that it succeeded.

So every petlab program, and the test session (:mod:`petlab.pytest_exit_status`), ends a failure
through :func:`os._exit` after flushing what it wrote. Success keeps Python's ordinary shutdown
(``atexit`` handlers, finalizers), since 0 is what the runtime gives anyway; a failure skips them,
as a crash would, after logging and the standard streams are flushed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from petlab.errors import FAILURE, INTERRUPTED, REFUSED, USAGE, PetlabError
from petlab.terminal_text import shown

#: A gRPC status a server answered, as an exit status: the caller's input was invalid (2), the
#: server refused (3); every other status (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, ...) is 1.
RPC_STATUSES = {
    "INVALID_ARGUMENT": USAGE,
    "OUT_OF_RANGE": USAGE,
    "PERMISSION_DENIED": REFUSED,
    "UNAUTHENTICATED": REFUSED,
    "RESOURCE_EXHAUSTED": REFUSED,
    "FAILED_PRECONDITION": REFUSED,
    "ABORTED": REFUSED,
}


def status_of(code: object) -> int:
    """The process status ``sys.exit(code)`` means: None is 0, an int itself, anything else
    (a message) 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


def exit_with(status: int) -> NoReturn:
    """Exit with ``status``, also after concrete's runtime has started (module docstring)."""
    if status == 0:
        sys.exit(0)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing to save
            stream.flush()
    os._exit(status)


def status_of_error(error: BaseException, prog: str) -> int:
    """The status for an exception that reached a program's top, after telling the user: a
    :class:`~petlab.errors.PetlabError` or an ``OSError`` (a file, a socket) is one line on stderr
    and its status (``petlab.errors.EXIT_STATUSES``); a gRPC error one line and 1; Ctrl-C 130;
    anything else is a bug: the traceback and 1."""
    if isinstance(error, KeyboardInterrupt):
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    if isinstance(error, PetlabError):
        print(f"{prog}: error: {shown(error)}", file=sys.stderr)
        return error.exit_status
    if isinstance(error, OSError):
        print(f"{prog}: error: {shown(error)}", file=sys.stderr)
        return FAILURE
    if _is_rpc_error(error):
        code, details = error.code(), error.details()  # type: ignore[attr-defined]
        name = getattr(code, "name", str(code))
        print(f"{prog}: {name}: {shown(details)}", file=sys.stderr)
        return RPC_STATUSES.get(name, FAILURE)
    traceback.print_exception(error)
    return FAILURE


def is_expected(error: BaseException) -> bool:
    """An error a program tells in one line (not a bug)."""
    return isinstance(error, PetlabError | OSError) or _is_rpc_error(error)


def _is_rpc_error(error: BaseException) -> bool:
    grpc = sys.modules.get("grpc")  # never imported here: a program that raised one has it loaded
    return grpc is not None and isinstance(error, grpc.RpcError) and hasattr(error, "code")


def run_program(main: Callable[[], int | None], prog: str | None = None) -> NoReturn:
    """Run a program's ``main()`` and exit with its status: its return value, a ``SystemExit``'s
    code (argparse's errors), else the status :func:`status_of_error` gives the exception."""
    prog = prog or os.path.basename(sys.argv[0])
    try:
        status = status_of(main())
    except SystemExit as stop:
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
        status = status_of(stop.code)
    except BaseException as error:
        status = status_of_error(error, prog)
    exit_with(status)
