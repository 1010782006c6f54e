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


def run_program(main: Callable[[], int | None]) -> NoReturn:
    """Run a program's ``main()`` and exit with its status: its return value, a ``SystemExit``'s
    code (argparse's errors), 130 on Ctrl-C, 1 with the traceback for any other exception."""
    try:
        status = status_of(main())
    except SystemExit as stop:
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
        status = status_of(stop.code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    except BaseException:
        traceback.print_exc()
        status = 1
    exit_with(status)
