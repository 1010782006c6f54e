"""Command-line programs as tables: each subcommand is a row (name, one-line help, module), and
the module it names defines ``add_arguments(parser)`` and ``run(args) -> int``.

Only the chosen subcommand's module is imported (``prog --help`` imports none), so a program with
many subcommands starts as fast as its lightest one, and a new subcommand is a new module plus one
row, never an edit to a dispatch chain.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    module: str  # dotted path of a module with add_arguments(parser) and run(args) -> int


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every program's help: each flag's default shown, descriptions kept in their lines (the
    examples), and no ``(default: None)`` or ``(default: False)`` where there is no default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, "", [], argparse.SUPPRESS) or action.help is None:
            return action.help
        return super()._get_help_string(action)


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain(text: str | None) -> str | None:
    """A docstring as help text: no reStructuredText markup (roles, double back-quotes), no runs
    of spaces, no indentation; line breaks kept (the examples are one per line)."""
    if text is None:
        return None
    text = _ROLE.sub(lambda match: match.group(1).rsplit(".", 1)[-1], text).replace("``", "")
    lines = [re.sub(r" {2,}", " ", line.strip()) for line in text.strip().splitlines()]
    return "\n".join(lines)


def version() -> str:
    """The installed petlab's version (pyproject's ``version``, the one place it is written)."""
    try:
        return importlib.metadata.version("petlab")
    except importlib.metadata.PackageNotFoundError:  # running from a tree that was never installed
        return "unknown"


def new_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A program's top-level parser: ``--version``, defaults shown, plain description."""
    parser = argparse.ArgumentParser(prog=prog, description=plain(description), formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    return parser


def add_commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """The subcommands of ``parser``: one is required, each with :class:`HelpFormatter`."""
    return parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_SubParser)


class _SubParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if "description" in kwargs:
            kwargs["description"] = plain(kwargs["description"])
        super().__init__(*args, **kwargs)


def build_parser(
    prog: str,
    description: str | None,
    table: Sequence[Subcommand],
    argv: Sequence[str],
    every_subcommand: bool = False,
) -> argparse.ArgumentParser:
    """The program's parser, with the arguments of the subcommand ``argv`` names (if any), or of
    every subcommand (the reference, ``petlab.cli_reference``)."""
    parser = new_parser(prog, description)
    commands = add_commands(parser)
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for row in table:
        sub = commands.add_parser(row.name, help=row.help, description=row.help)
        sub.set_defaults(subcommand=row)
        if every_subcommand or row.name == chosen:
            importlib.import_module(row.module).add_arguments(sub)
    return parser


def parse(prog: str, description: str | None, table: Sequence[Subcommand], argv: Sequence[str]):
    """Parsed arguments; ``args.subcommand`` is the chosen row."""
    return build_parser(prog, description, table, argv).parse_args(list(argv))


def run(prog: str, description: str | None, table: Sequence[Subcommand], argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the chosen subcommand's ``run(args)``; an expected error (a
    ``PetlabError``, an ``OSError``, a gRPC error) becomes one line and its exit status
    (``petlab.exit_status.status_of_error``), anything else propagates (a bug: traceback, 1)."""
    quiet_dependency_warnings()
    return guarded(prog, lambda: _run_chosen(prog, description, table, argv))


def _run_chosen(prog: str, description: str | None, table: Sequence[Subcommand], argv: Sequence[str]) -> int:
    args = parse(prog, description, table, argv)
    return int(importlib.import_module(args.subcommand.module).run(args))


def guarded(prog: str, body: Callable[[], int]) -> int:
    """``body()``'s status, or the status of the expected error it raised (told in one line)."""
    from petlab.exit_status import is_expected, status_of_error

    try:
        return body()
    except Exception as error:
        if not is_expected(error):
            raise
        return status_of_error(error, prog)


def quiet_dependency_warnings() -> None:
    """For the command-line programs only: concrete-python imports setuptools' ``pkg_resources``,
    which warns (two lines on stderr) on every start; a program's user can do nothing about it.
    Library users and the tests still see it (the tests name it in ``pyproject.toml``)."""
    warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
    warnings.filterwarnings(
        "ignore", message="Deprecated call to `pkg_resources", category=DeprecationWarning
    )
