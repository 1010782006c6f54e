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

from petlab.errors import FAILURE, INTERRUPTED, REFUSED, USAGE, PetlabError, file_problem
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
    """The status for an exception that reached a program's top, after telling the user in one
    line, :func:`error_line` (``prog: error: ...``): a :class:`~petlab.errors.PetlabError` or an
    ``OSError`` (a file, a socket) with its status (``petlab.errors.EXIT_STATUSES``), a gRPC error
    with its code's (:data:`RPC_STATUSES`); Ctrl-C 130; anything else is a bug: the traceback and 1."""
    if isinstance(error, KeyboardInterrupt):
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    if isinstance(error, PetlabError):
        status = error.exit_status
    elif isinstance(error, OSError):
        status = FAILURE
    elif _is_rpc_error(error):
        status = RPC_STATUSES.get(_rpc_code(error), FAILURE)
    else:
        traceback.print_exception(error)
        return FAILURE
    print(error_line(prog, error), file=sys.stderr)
    return status


def error_line(prog: str, error: BaseException) -> str:
    """The one line every petlab program prints for an expected error: ``prog: error: message``,
    where a file's problem is ``PATH: reason`` and a gRPC failure ``CODE: the server's details``
    (printed safely: ``petlab.terminal_text.shown``)."""
    if isinstance(error, OSError) and not isinstance(error, PetlabError):
        message = file_problem(error)
    elif _is_rpc_error(error):
        message = f"{_rpc_code(error)}: {error.details()}"  # type: ignore[attr-defined]
    else:
        message = str(error)
    return f"{prog}: error: {shown(message)}"


def _rpc_code(error: BaseException) -> str:
    code = error.code()  # type: ignore[attr-defined]
    return str(getattr(code, "name", code))


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
