"""Command-line programs as tables: each subcommand is a row (name, one-line help, module), and
the module it names defines ``add_arguments(parser)`` and ``run(args) -> int``.

Only the chosen subcommand's module is imported (``prog --help`` imports none), so a program with
many subcommands starts as fast as its lightest one, and a new subcommand is a new module plus one
row, never an edit to a dispatch chain.
"""

from __future__ import annotations

import argparse
import importlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    module: str  # dotted path of a module with add_arguments(parser) and run(args) -> int


def build_parser(
    prog: str, description: str | None, table: Sequence[Subcommand], argv: Sequence[str]
) -> argparse.ArgumentParser:
    """The program's parser, with the arguments of the subcommand ``argv`` names (if any)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for row in table:
        sub = commands.add_parser(row.name, help=row.help, description=row.help)
        sub.set_defaults(subcommand=row)
        if row.name == chosen:
            importlib.import_module(row.module).add_arguments(sub)
    return parser


def parse(prog: str, description: str | None, table: Sequence[Subcommand], argv: Sequence[str]):
    """Parsed arguments; ``args.subcommand`` is the chosen row."""
    return build_parser(prog, description, table, argv).parse_args(list(argv))


def run(prog: str, description: str | None, table: Sequence[Subcommand], argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the chosen subcommand's ``run(args)``."""
    quiet_dependency_warnings()
    args = parse(prog, description, table, argv)
    return int(importlib.import_module(args.subcommand.module).run(args))


def quiet_dependency_warnings() -> None:
    """For the command-line programs only: concrete-python imports setuptools' ``pkg_resources``,
    which warns (two lines on stderr) on every start; a program's user can do nothing about it.
    Library users and the tests still see it (the tests name it in ``pyproject.toml``)."""
    warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
    warnings.filterwarnings(
        "ignore", message="Deprecated call to `pkg_resources", category=DeprecationWarning
    )
