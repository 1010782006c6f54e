"""The root of petlab's exception classes, and what each means to a command-line program.

Every exception petlab raises on purpose derives from :class:`PetlabError` through one of three
meanings; the programs map them onto one exit-status table (:data:`EXIT_STATUSES`, applied by
:mod:`petlab.exit_status`). Anything else reaching a program's top is a bug: it prints a traceback
and exits 1.

Each class also names the gRPC status a server call that it ends is answered with
(:attr:`PetlabError.grpc_status`; ``server.common.boundary`` applies it): the call ends with that
status and the error's message, a sentence written for the caller that names no confidential
figure. ``INTERNAL`` (the root's) sends no message at all, as for any exception that is not a
``PetlabError`` (a bug: its traceback goes to the server's log).

 The classes that derived from :class:`ValueError` before the root existed still do (as well as
from :class:`BadInput`), so code that caught ``ValueError`` still catches them; the ones that
derived from :class:`Exception` do not become ``ValueError`` (a handler for ``ValueError`` would
then catch them first).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

OK = 0
FAILURE = 1
USAGE = 2
REFUSED = 3
INTERRUPTED = 130

#: Every exit status a petlab program uses, with what it means (docs/reference/exit-statuses.md).
EXIT_STATUSES: tuple[tuple[int, str], ...] = (
    (OK, "success"),
    (
        FAILURE,
        "failure: the server or a cluster was unavailable, an RPC failed, a file could not be "
        "read or written at run time; or a bug (then a traceback is printed)",
    ),
    (USAGE, "usage error or bad input: a wrong flag or environment variable, an invalid input file or value"),
    (REFUSED, "refused or aborted: the server or the analysis controller declined the request"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)


class PetlabError(Exception):
    """An error petlab raises on purpose; its message is one line a user can read."""

    exit_status = FAILURE
    #: the name of the ``grpc.StatusCode`` a call ended by this error is answered with
    grpc_status = "INTERNAL"


class BadInput(PetlabError):
    """What the user or a caller supplied is wrong: a flag, a file, a value (exit status 2)."""

    exit_status = USAGE
    grpc_status = "INVALID_ARGUMENT"


class Refused(PetlabError):
    """A server, the analysis controller or a policy declined or aborted the request (exit 3)."""

    exit_status = REFUSED
    grpc_status = "FAILED_PRECONDITION"


class Unavailable(PetlabError):
    """A service or resource needed is not there or did not answer in time (exit status 1)."""

    exit_status = FAILURE
    grpc_status = "UNAVAILABLE"


def file_problem(error: OSError) -> str:
    """An ``OSError`` about a file as every petlab program words it: ``PATH: reason``
    (``rows.csv: No such file or directory``), as ``cat`` and ``cp`` do; ``str(error)`` when it
    names no file."""
    if error.filename is None or not error.strerror:
        return str(error)
    return f"{error.filename}: {error.strerror}"


class MissingFile(BadInput, FileNotFoundError):
    """A file the user named is not there (exit status 2): ``PATH: No such file or directory``,
    then the way out when one is given (``hint``)."""

    def __init__(self, path: object, hint: str = "") -> None:
        FileNotFoundError.__init__(self, 2, "No such file or directory", str(path))
        self.hint = hint

    def __str__(self) -> str:
        return file_problem(self) + (f"; {self.hint}" if self.hint else "")


@contextmanager
def reading_input(what: str = "") -> Iterator[None]:
    """Turn a ``ValueError``/``KeyError``/``TypeError`` raised while reading or checking what the
    user supplied (a file, a flag's value) into :class:`BadInput` (``what: detail``), and a
    ``FileNotFoundError`` for a file the user named into :class:`MissingFile`; used around input
    parsing only, never around computation, so a bug elsewhere still shows its traceback."""
    try:
        yield
    except PetlabError:
        raise
    except FileNotFoundError as error:
        raise MissingFile(error.filename if error.filename is not None else what) from error
    except (ValueError, KeyError, TypeError) as error:
        detail = f"missing field {error}" if isinstance(error, KeyError) else str(error)
        raise BadInput(f"{what}: {detail}" if what else detail) from error
