"""``petlab-server``: the data owner's gRPC server.

``petlab-server serve --port 50051 --data-dir DIR --model iris`` hosts encrypted k-NN models (and the
Paillier baseline over the same training points) and the analysis controller, with gRPC health
checking and server reflection. Every flag can also come from an environment variable
(``PETLAB_PORT``, ``PETLAB_DATA_DIR``, ``PETLAB_MODELS`` as a comma-separated list, ...; see
``--help``). Without ``--tls-cert/--tls-key`` the server listens in plaintext and only on a
loopback address, and says so in its log.

Subcommands are rows of :data:`COMMANDS` (``petlab.subcommands``): a new one is a module and a row.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, NoReturn

from petlab.exit_status import run_program
from petlab.subcommands import Subcommand, build_parser, quiet_dependency_warnings, run

if TYPE_CHECKING:
    from petlab.server.app import ServerOptions

DESCRIPTION = (
    "The data owner's gRPC server: encrypted k-NN models and the analysis controller. Every flag "
    "can also come from an environment variable (PETLAB_PORT, PETLAB_DATA_DIR, ...; see each "
    "subcommand's --help). Without --tls-cert/--tls-key it listens in plaintext, on loopback only."
)

COMMANDS = (
    Subcommand("serve", "host encrypted k-NN models and the analysis controller", "petlab.server.serve"),
    Subcommand(
        "persons",
        "the analysis controller's persons: list them, lift or impose a suspension",
        "petlab.server.controller.persons_command",
    ),
)


def parse_args(argv: list[str]) -> tuple[ServerOptions, argparse.Namespace]:
    """``serve``'s options and the parsed flags (tests and experiments build servers from these)."""
    quiet_dependency_warnings()
    parser = build_parser("petlab-server", DESCRIPTION, COMMANDS, argv)
    args = parser.parse_args(argv)
    from petlab.server.flags import serve_options

    try:
        return serve_options(args), args
    except ValueError as exc:  # a bad combination of flags: a usage error, exit status 2
        parser.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"] and not {"-h", "--help"} & set(argv):  # seconds pass before the next line
        logging.getLogger("petlab.server").info("starting: loading the models and the encryption library")
    return run("petlab-server", DESCRIPTION, COMMANDS, argv)


def program() -> NoReturn:
    """The console script: :func:`main`, its exit status kept after concrete's runtime has run
    (``petlab.exit_status``). ``serve`` holds the stop signals first, before the encryption library
    and its threads exist (``server.common.stop_signals``); :func:`main` called in a process of
    its own (a test) leaves the signals alone."""
    if sys.argv[1:2] == ["serve"]:
        from petlab.server.common import stop_signals

        stop_signals.hold()
    run_program(main)


if __name__ == "__main__":
    program()
