"""The command-line reference, generated from the programs' own parsers (never copied by hand).

``python -m petlab.cli_reference [DIR]`` writes, into ``DIR`` (default ``docs/reference``):

- ``cli.md``: every program, every subcommand, every flag with its default and variable;
- ``environment.md``: every environment variable, the flag it feeds, and the renamed ones;
- ``exit-statuses.md``: the exit-status table (``petlab.errors.EXIT_STATUSES``).

The pages are built with every ``PETLAB_*`` variable unset and the home directory written ``~``,
so they do not depend on who generates them; a test regenerates them and compares.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from petlab.errors import EXIT_STATUSES
from petlab.subcommands import build_parser, plain, quiet_dependency_warnings

ENV = re.compile(r"\s*\[env (PETLAB_[A-Z0-9_]+)(=1)?(, comma-separated)?\]")

#: Variables read outside any flag.
OTHER_VARIABLES = (
    (
        "PETLAB_CACHE_DIR",
        "petlab-experiments",
        "compile cache of local-demo and of library calls without a directory"
        " (`~/.cache/petlab/models`); petlab-server caches in `<data-dir>/models`",
    ),
    ("PETLAB_PAPER_SCALE", "tests", "run the paper family's real-encryption tests (opt-in, slow)"),
    ("PETLAB_HOSTILE_IN_PROCESS", "tests", "run the hostile split-model calls in process too"),
)


def _server() -> argparse.ArgumentParser:
    from petlab.server.main import COMMANDS, DESCRIPTION

    return build_parser("petlab-server", DESCRIPTION, COMMANDS, [], every_subcommand=True)


def _client() -> argparse.ArgumentParser:
    from petlab.client.main import build_parser as client_parser

    return client_parser()


def _analyst() -> argparse.ArgumentParser:
    from petlab.client.analyst import build_parser as analyst_parser

    return analyst_parser()


def _synth() -> argparse.ArgumentParser:
    from petlab.plaindata.cli import COMMANDS, DESCRIPTION

    return build_parser("petlab-synth", DESCRIPTION, COMMANDS, [], every_subcommand=True)


def _experiments() -> argparse.ArgumentParser:
    from petlab.experiments.cli import DESCRIPTION, EXPERIMENTS

    return build_parser("petlab-experiments", DESCRIPTION, EXPERIMENTS, [], every_subcommand=True)


#: The five console scripts (pyproject's [project.scripts]) and their whole parsers.
PROGRAMS: tuple[tuple[str, Callable[[], argparse.ArgumentParser]], ...] = (
    ("petlab-server", _server),
    ("petlab-client", _client),
    ("petlab-analyst", _analyst),
    ("petlab-synth", _synth),
    ("petlab-experiments", _experiments),
)


@dataclass(frozen=True)
class Flag:
    names: str
    default: str
    variable: str
    help: str


@dataclass(frozen=True)
class Command:
    path: str  # "petlab-server serve"
    description: str
    groups: tuple[tuple[str, tuple[Flag, ...]], ...]


@contextmanager
def neutral_environment() -> Iterator[None]:
    """No ``PETLAB_*`` variable while the parsers are built (their defaults come from them)."""
    saved = {name: value for name, value in os.environ.items() if name.startswith("PETLAB_")}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


def _default(action: argparse.Action) -> str:
    if action.default in (None, False, "", [], argparse.SUPPRESS) or action.required:
        return ""
    text = str(action.default)
    home = str(Path.home())
    return "~" + text[len(home) :] if text.startswith(home) else text


def _flag(action: argparse.Action) -> Flag:
    metavar = action.metavar if isinstance(action.metavar, str) else None
    names = ", ".join(action.option_strings) or (metavar or action.dest)
    if action.choices:
        names += " {" + ",".join(str(c) for c in action.choices) + "}"
    elif action.option_strings and action.nargs != 0:
        names += f" {metavar or action.dest.upper()}"
    text = plain(action.help or "") or ""
    found = ENV.search(text)
    variable = found.group(1) if found else ""
    text = ENV.sub("", text).replace("\n", " ")
    if action.required:
        text += " (required)"
    return Flag(names, _default(action), variable, text)


def commands(prog: str, parser: argparse.ArgumentParser) -> Iterator[Command]:
    """``parser`` and every subcommand under it, depth first, in the order of their help."""
    groups = []
    children: list[tuple[str, argparse.ArgumentParser]] = []
    for group in parser._action_groups:
        flags = []
        for action in group._group_actions:
            if isinstance(action, argparse._SubParsersAction):
                children.extend((name, sub) for name, sub in action.choices.items())
            elif not isinstance(action, argparse._HelpAction):
                flags.append(_flag(action))
        if flags:
            groups.append((group.title or "", tuple(flags)))
    yield Command(prog, plain(parser.description or "") or "", tuple(groups))
    for name, sub in children:
        yield from commands(f"{prog} {name}", sub)


def all_commands() -> list[Command]:
    with neutral_environment():
        return [command for prog, build in PROGRAMS for command in commands(prog, build())]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") if text else ""


def cli_page(every: list[Command]) -> str:
    lines = [
        "# Command-line reference",
        "",
        "Generated from the programs' parsers by `python -m petlab.cli_reference`; do not edit by hand.",
        "Every program answers `--help` and `--version`.",
        "Exit statuses: [exit-statuses.md](exit-statuses.md); environment variables:",
        "[environment.md](environment.md).",
        "",
    ]
    for command in every:
        depth = command.path.count(" ")
        lines += [f"{'#' * min(depth + 2, 4)} `{command.path}`", ""]
        if command.description:
            if depth == 0:
                lines += ["```text", command.description, "```", ""]
            else:
                lines += [command.description.replace("\n", " "), ""]
        for title, flags in command.groups:
            lines += [f"*{title}*", "", "| argument | default | variable | meaning |", "|---|---|---|---|"]
            lines += [
                f"| `{_cell(f.names)}` | {_cell(f'`{f.default}`' if f.default else '')} | "
                f"{_cell(f'`{f.variable}`' if f.variable else '')} | {_cell(f.help)} |"
                for f in flags
            ]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def environment_page(every: list[Command]) -> str:
    from petlab.server.common.environment import RENAMED

    rows: dict[str, list[str]] = {}
    for command in every:
        for _, flags in command.groups:
            for flag in flags:
                if flag.variable:
                    rows.setdefault(flag.variable, []).append(f"`{command.path} {flag.names.split()[0]}`")
    lines = [
        "# Environment variables",
        "",
        "Generated by `python -m petlab.cli_reference`; do not edit by hand.",
        "",
        "The rule: a flag's variable is `PETLAB_` followed by the flag's name in upper case, dashes as",
        "underscores (`--key-cap-mb` is `PETLAB_KEY_CAP_MB`); a flag given on the command line wins",
        "over its variable. A yes/no flag's variable takes 1/true/yes or 0/false/no. A repeatable flag",
        "(`--model`, `--bounds`) takes a comma-separated list in its variable. Three names are kept",
        "outside the rule on purpose, as one variable serves more than a flag: `PETLAB_CACHE_DIR` (the",
        "compile cache outside the server, which keeps its own in `<data-dir>/models`),",
        "`PETLAB_CLIENT_CACHE` (the client's key cache) and `PETLAB_ACS_DATA`.",
        "",
        "| variable | sets |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {', '.join(sorted(set(uses)))} |" for name, uses in sorted(rows.items())]
    lines += [
        "",
        "## Renamed (still read, with a deprecation warning)",
        "",
        "| old name | new name |",
        "|---|---|",
    ]
    lines += [f"| `PETLAB_{old}` | `PETLAB_{new}` |" for new, old in sorted(RENAMED.items())]
    lines += ["", "## Read outside any flag", "", "| variable | read by | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | {who} | {meaning} |" for name, who, meaning in OTHER_VARIABLES]
    return "\n".join(lines) + "\n"


#: The exit-status page's examples: (what it shows, a console block of commands and what they
#: print). ``tests/docs/test_docs_commands.py`` runs each as shown, in an empty directory with no
#: server on 127.0.0.1:1, and compares what the programs print.
EXIT_STATUS_EXAMPLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "A value that cannot be right is named, and refused before any connection (2):",
        (
            "$ petlab-client classify --server 127.0.0.1:1 --model iris --features 5.1,abc,1.4,0.2",
            "petlab-client: error: --features: value 2, 'abc', is not a finite number (give the "
            "record's values as comma-separated numbers, e.g. 5.1,3.5,1.4,0.2)",
            "$ echo $?",
            "2",
        ),
    ),
    (
        "No server at the address (1): the address tried, and what to do:",
        (
            "$ petlab-client models --server 127.0.0.1:1",
            "petlab-client: error: UNAVAILABLE: no server answered at 127.0.0.1:1: start one with "
            "`petlab-server serve`, or give a running one's address with --server HOST:PORT (gRPC: ...)",
            "$ echo $?",
            "1",
        ),
    ),
    (
        "A bearer token is never sent in plaintext to another machine (2, before any connection):",
        (
            "$ petlab-client models --server 192.0.2.1:1 --token t0k3n",
            "petlab-client: error: refusing to send the bearer token in plaintext to 192.0.2.1:1: give "
            "--tls-ca to use TLS (or --insecure-token to send it readable by anyone on the path)",
            "$ echo $?",
            "2",
        ),
    ),
    (
        "A mistake in the command line: the usage, then the subcommand's error line (2):",
        (
            "$ petlab-client classify --server 127.0.0.1:1 --model iris",
            "usage: petlab-client classify [-h] [--server SERVER] ...",
            "...",
            "petlab-client classify: error: one of the arguments --features --csv is required",
            "$ echo $?",
            "2",
        ),
    ),
    (
        "A file named on the command line that is malformed or missing (2), in every program:",
        (
            "$ echo '{ not json' > bad.json",
            "$ petlab-analyst prepare bad.json --key analyst.pem",
            "petlab-analyst: error: bad.json: Expecting property name enclosed in double quotes: line 1 "
            "column 3 (char 2)",
            "$ echo $?",
            "2",
            "$ petlab-synth plausible --data none.csv --runs 5 --out o.csv",
            "petlab-synth: error: none.csv: No such file or directory",
            "$ echo $?",
            "2",
            "$ petlab-experiments plausible-bench --data none.csv",
            "petlab-experiments: error: none.csv: No such file or directory; --data names the ACS 2013 "
            "CSV (...); leave it out to use the shipped 5,000-record sample",
            "$ echo $?",
            "2",
            "$ petlab-server persons --data-dir .",
            "petlab-server: error: no controller database at sessions.sqlite (check --data-dir)",
            "$ echo $?",
            "2",
        ),
    ),
)


def exit_status_page() -> str:
    lines = [
        "# Exit statuses",
        "",
        "Generated from `petlab.errors.EXIT_STATUSES` by `python -m petlab.cli_reference`.",
        "Every petlab program uses this table (`petlab.exit_status`).",
        "",
        "| status | meaning |",
        "|---|---|",
    ]
    lines += [f"| {status} | {meaning} |" for status, meaning in EXIT_STATUSES]
    lines += [
        "",
        "An error the program expects (a `petlab.errors.PetlabError`, an `OSError`, a gRPC error) is",
        "one line on stderr, `PROGRAM: error: MESSAGE`: a file's problem reads `PATH: reason`",
        "(`rows.csv: No such file or directory`), a gRPC failure `CODE: details`",
        "(`UNAVAILABLE: no server answered at 127.0.0.1:50051: ...`). Mistakes in a command line",
        "(an unknown flag, a missing argument) are argparse's usage line and",
        "`PROGRAM SUBCOMMAND: error: MESSAGE`. Anything else is a bug: the traceback is printed and",
        "the status is 1.",
        "A gRPC status from the server maps to 2 (INVALID_ARGUMENT, OUT_OF_RANGE), 3 (PERMISSION_DENIED,",
        "UNAUTHENTICATED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED) or 1 (any other).",
        "A file named on the command line that is missing or malformed is bad input (2); a file that",
        "cannot be written, or a port that cannot be bound, at run time is a failure (1).",
        "`petlab-analyst run` exits 3 when the controller aborts the sequence.",
        "`petlab-client` refusing a server's weak or tampered parameters is bad input (2).",
    ]
    if EXIT_STATUS_EXAMPLES:
        lines += [
            "",
            "## Examples",
            "",
            "What the programs print for common mistakes, as the documentation's tests run them (in an",
            "empty directory, with no server listening on 127.0.0.1:1). Status 3 needs a server or a",
            "controller that declines: `petlab-analyst run` when the controller aborts the sequence,",
            "a call refused for a missing token (UNAUTHENTICATED) or a full server (RESOURCE_EXHAUSTED).",
        ]
        for sentence, console in EXIT_STATUS_EXAMPLES:
            lines += ["", sentence, "", "```console", *console, "```"]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """File name -> content of every generated reference page."""
    every = all_commands()
    return {
        "cli.md": cli_page(every),
        "environment.md": environment_page(every),
        "exit-statuses.md": exit_status_page(),
    }


def main(argv: list[str] | None = None) -> int:
    quiet_dependency_warnings()
    argv = sys.argv[1:] if argv is None else argv
    directory = Path(argv[0] if argv else "docs/reference")
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (directory / name).write_text(text)
        print(f"wrote {directory / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
