"""One command-line convention for the five programs: --version and --help, plain help with defaults
shown, one exit-status table (0 ok, 1 failure, 2 usage/bad input, 3 refused, 130 interrupted; a
bug is a traceback and 1), one rule for environment variables, and the reference pages generated
from the parsers (docs/reference/) kept in step with them."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from petlab import cli_reference
from petlab.errors import BadInput, PetlabError, Refused, Unavailable
from petlab.exit_status import status_of_error

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROGRAMS = [name for name, _ in cli_reference.PROGRAMS]
MAINS = {
    "petlab-server": "petlab.server.main",
    "petlab-client": "petlab.client.main",
    "petlab-analyst": "petlab.client.analyst",
    "petlab-synth": "petlab.plaindata.cli",
    "petlab-experiments": "petlab.experiments.cli",
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETLAB_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _script(prog: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / prog), *args], capture_output=True, text=True, timeout=120, env=_env(), cwd=cwd
    )


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env(), cwd=cwd
    )


@pytest.fixture(scope="module")
def every_command() -> list[cli_reference.Command]:
    return cli_reference.all_commands()


@pytest.mark.parametrize("prog", PROGRAMS)
def test_every_program_answers_version_and_help(prog):
    version = _script(prog, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"{prog} {importlib.metadata.version('petlab')}"
    shown = _script(prog, "--help")
    assert shown.returncode == 0 and shown.stdout.startswith(f"usage: {prog}"), shown.stderr
    assert "``" not in shown.stdout and ":data:" not in shown.stdout


def test_help_is_plain_sentences_with_defaults(every_command):
    """Every argument has a help sentence, none carries RST markup or a run of spaces, and every
    flag with a default shows it (the formatter's "(default: ...)")."""
    missing, marked, twice = [], [], []
    for command in every_command:
        for _, flags in command.groups:
            for flag in flags:
                if not flag.help.strip():
                    missing.append(f"{command.path} {flag.names}")
                if flag.default and re.search(r"\(default [^:]", flag.help):
                    twice.append(f"{command.path} {flag.names}: {flag.help}")
                if "``" in flag.help or ":data:`" in flag.help or "  " in flag.help:
                    marked.append(f"{command.path} {flag.names}: {flag.help}")
        if "``" in command.description or "  " in command.description:
            marked.append(f"{command.path}: description")
    assert not missing, f"arguments without help: {missing}"
    assert not marked, f"help with markup or runs of spaces: {marked}"
    assert not twice, f"help that states the default the formatter already shows: {twice}"
    from petlab.client.main import build_parser

    classify = build_parser()._subparsers._group_actions[0].choices["classify"].format_help()  # type: ignore[union-attr]
    classify = " ".join(classify.split())
    assert "(default: 127.0.0.1:50051)" in classify and "--allow-outside-bounds" in classify


def test_serve_flags_are_grouped_and_name_their_variable(every_command):
    serve = next(c for c in every_command if c.path == "petlab-server serve")
    titles = [title for title, _ in serve.groups]
    assert len(titles) >= 4 and "encrypted k-NN models" in titles and "analysis controller" in titles
    for _, flags in serve.groups:
        for flag in flags:
            name = flag.names.split()[0]
            assert flag.variable == "PETLAB_" + name.lstrip("-").upper().replace("-", "_"), flag


def test_persons_has_real_subcommands(every_command):
    paths = {c.path for c in every_command}
    assert {
        "petlab-server persons list",
        "petlab-server persons lift",
        "petlab-server persons suspend",
    } <= paths
    from petlab.server.main import COMMANDS, DESCRIPTION
    from petlab.subcommands import build_parser

    argv = ["persons", "--data-dir", "a", "lift", "bob", "--note", "ok"]
    args = build_parser("petlab-server", DESCRIPTION, COMMANDS, argv).parse_args(argv)
    assert (args.action, args.person, args.data_dir, args.note) == ("lift", "bob", Path("a"), "ok")
    argv = ["persons", "suspend", "eve", "--data-dir", "b"]
    args = build_parser("petlab-server", DESCRIPTION, COMMANDS, argv).parse_args(argv)
    assert (args.action, args.person, args.data_dir) == ("suspend", "eve", Path("b"))
    args = build_parser("petlab-server", DESCRIPTION, COMMANDS, ["persons"]).parse_args(["persons"])
    assert args.action is None and not hasattr(args, "person")  # run() lists


# ---------------------------------------------------------------- exit statuses


@pytest.mark.parametrize("prog", PROGRAMS)
def test_a_usage_error_is_2(prog):
    done = _script(prog, "--no-such-flag")
    assert done.returncode == 2 and "usage:" in done.stderr


# Bad input in each program (status 2 and one line ``prog: error: ...``, a missing file named
# ``PATH: No such file or directory`` by every program): the exit-status page's examples, which
# tests/docs/test_docs_commands.py runs as the page shows them.


def test_one_error_line_for_files_and_rpc_failures(tmp_path, capsys):
    """``prog: error: message`` for every expected error: a file's problem as ``PATH: reason``
    (also for a file named on the command line that is missing), a gRPC failure as ``CODE:
    details``, a program's own error as its message."""
    import grpc

    from petlab.errors import MissingFile, reading_input
    from petlab.exit_status import error_line

    class Rpc(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            return "failed to connect to all addresses"

    missing = tmp_path / "none.json"
    with pytest.raises(MissingFile) as caught, reading_input(str(missing)):
        missing.read_text()
    assert status_of_error(caught.value, "p") == 2
    assert error_line("p", caught.value) == f"p: error: {missing}: No such file or directory"
    assert error_line("p", PermissionError(13, "Permission denied", "out.csv")) == (
        "p: error: out.csv: Permission denied"
    )
    assert str(MissingFile("a.csv", "give --data")) == "a.csv: No such file or directory; give --data"
    assert status_of_error(Rpc(), "p") == 1
    assert error_line("p", Rpc()) == "p: error: UNAVAILABLE: failed to connect to all addresses"
    assert error_line("p", Refused("declined\x1b[2J")) == "p: error: declined\\x1b[2J"
    assert capsys.readouterr().err.splitlines() == [
        f"p: error: {missing}: No such file or directory",
        "p: error: UNAVAILABLE: failed to connect to all addresses",
    ]


#: Each program with its main's entry point and a function its run reaches, replaced by one that
#: raises: a bug (ValueError: the analyst and synth once mapped it to 2) and Ctrl-C.
TARGETS = {
    "petlab-server": ("petlab.server.controller.persons_command", "run", ["persons"]),
    "petlab-client": ("petlab.client.main", "_main", ["models"]),
    "petlab-analyst": ("petlab.client.analyst", "keygen", ["keygen", "--out", "k.pem"]),
    "petlab-synth": (
        "petlab.plaindata.commands.commute_data",
        "run",
        ["commute-data", "--workers", "10", "--out", "o"],
    ),
    # the experiment whose module imports fastest (0.3 CPU-s; audit-bench's took 1.5, three times)
    "petlab-experiments": ("petlab.experiments.liveness_stress", "run", ["liveness-stress"]),
}


def _raising(prog: str, error: str, tmp_path: Path) -> subprocess.CompletedProcess:
    module, function, argv = TARGETS[prog]
    code = (
        f"import sys, {module} as target, {MAINS[prog]} as program\n"
        "def broken(*a, **k):\n"
        f"    raise {error}\n"
        f"target.{function} = broken\n"
        f"sys.argv = [{prog!r}, *{argv!r}]\n"
        "program.program()\n"
    )
    return _python(code, tmp_path)


@pytest.mark.parametrize("prog", PROGRAMS)
def test_a_bug_is_a_traceback_and_1_and_ctrl_c_is_130(prog, tmp_path):
    bug = _raising(prog, "ValueError('a bug, not a usage error')", tmp_path)
    assert bug.returncode == 1, bug.stderr
    assert "Traceback" in bug.stderr and "a bug, not a usage error" in bug.stderr
    interrupted = _raising(prog, "KeyboardInterrupt", tmp_path)
    assert interrupted.returncode == 130 and "interrupted" in interrupted.stderr
    refused = _raising(prog, "__import__('petlab.errors').errors.Refused('no more analyses')", tmp_path)
    assert refused.returncode == 3 and "no more analyses" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_error_classes_and_rpc_statuses_map_to_the_table(capsys):
    import grpc

    from petlab.client.channel import InsecureCredentials
    from petlab.client.main import UserError
    from petlab.server.knn.evaluators import ClusterUnavailable, EvaluationRejected

    class Rpc(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode) -> None:
            self._code = code

        def code(self) -> grpc.StatusCode:
            return self._code

        def details(self) -> str:
            return "said the server"

    assert status_of_error(BadInput("x"), "p") == 2
    assert status_of_error(UserError("x"), "p") == 2 and status_of_error(InsecureCredentials("x"), "p") == 2
    assert status_of_error(EvaluationRejected("x"), "p") == 2
    assert status_of_error(Refused("x"), "p") == 3
    assert status_of_error(Unavailable("x"), "p") == 1 and status_of_error(ClusterUnavailable("x"), "p") == 1
    assert status_of_error(PetlabError("x"), "p") == 1
    assert status_of_error(PermissionError("x"), "p") == 1  # run-time OSError: 1, not 2
    assert status_of_error(Rpc(grpc.StatusCode.PERMISSION_DENIED), "p") == 3
    assert status_of_error(Rpc(grpc.StatusCode.RESOURCE_EXHAUSTED), "p") == 3
    assert status_of_error(Rpc(grpc.StatusCode.INVALID_ARGUMENT), "p") == 2
    assert status_of_error(Rpc(grpc.StatusCode.UNAVAILABLE), "p") == 1
    assert "Traceback" not in capsys.readouterr().err
    try:
        raise KeyError("bug")
    except KeyError as bug:
        assert status_of_error(bug, "p") == 1
    assert "Traceback" in capsys.readouterr().err


# ---------------------------------------------------------------- environment variables


def test_the_variable_rule_and_the_old_names(monkeypatch, capsys):
    from petlab.server.main import parse_args

    for name in [n for n in os.environ if n.startswith("PETLAB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PETLAB_GRACE", "5")
    monkeypatch.setenv("PETLAB_MODEL", "iris,wine")
    monkeypatch.setenv("PETLAB_KEY_IDLE_HOURS", "2")
    monkeypatch.setenv("PETLAB_BOUNDS", "iris=b.csv")
    _, args = parse_args(["serve"])
    assert (args.grace, args.key_idle_hours) == (5.0, 2.0)
    assert "deprecated" not in capsys.readouterr().err
    for new in ("GRACE", "MODEL", "KEY_IDLE_HOURS", "BOUNDS"):
        monkeypatch.delenv(f"PETLAB_{new}")
    monkeypatch.setenv("PETLAB_GRACE_SECONDS", "7")
    monkeypatch.setenv("PETLAB_TOKENS_FILE", "tokens.txt")
    monkeypatch.setenv("PETLAB_MODELS", "digits")
    options, args = parse_args(["serve"])
    assert args.grace == 7.0 and args.tokens == Path("tokens.txt") and options.knn.models == ["digits"]
    warned = capsys.readouterr().err
    for old, new in (("GRACE_SECONDS", "GRACE"), ("TOKENS_FILE", "TOKENS"), ("MODELS", "MODEL")):
        assert f"PETLAB_{old} is deprecated, use PETLAB_{new}" in warned
    monkeypatch.setenv("PETLAB_GRACE", "9")  # the new name wins
    assert parse_args(["serve"])[1].grace == 9.0
    monkeypatch.setenv("PETLAB_PORT", "not-a-port")
    with pytest.raises(BadInput, match="PETLAB_PORT"):
        parse_args(["serve"])


def test_a_bad_variable_is_a_usage_error(tmp_path):
    env = _env() | {"PETLAB_PORT": "x"}
    done = subprocess.run(
        [str(BIN / "petlab-server"), "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "PETLAB_PORT='x'" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- features outside the public range


def test_a_feature_outside_the_public_range_is_refused_unless_allowed(capsys):
    import numpy as np

    from petlab.client.main import UserError, within_bounds
    from petlab.protos import knn_pb2

    info = knn_pb2.ModelInfo(
        name="iris",
        d=2,
        feature_names=["a", "b"],
        feature_lows=[0.0, 1.0],
        feature_highs=[10.0, 2.0],
    )
    inside = np.array([[0.0, 1.0], [10.0, 2.0]])
    assert within_bounds(inside, info, allow=False) is inside
    with pytest.raises(UserError, match=r"a = 500 lies outside model iris's public range \[0, 10\]"):
        within_bounds(np.array([[500.0, 1.5]]), info, allow=False)
    with pytest.raises(UserError, match=r"row 2: b = 0\.5"):
        within_bounds(np.array([[1.0, 1.5], [1.0, 0.5]]), info, allow=False)
    assert within_bounds(np.array([[500.0, 1.5]]), info, allow=True).tolist() == [[500.0, 1.5]]
    assert "warning" in capsys.readouterr().err
    unbounded = knn_pb2.ModelInfo(name="old", d=2, feature_names=["a", "b"])
    assert within_bounds(np.array([[500.0, 1.5]]), unbounded, allow=False).shape == (1, 2)


# ---------------------------------------------------------------- the reference pages


def test_the_reference_pages_are_generated_from_the_parsers():
    """docs/reference/{cli,environment,exit-statuses}.md are what the parsers say today:
    regenerate with ``python -m petlab.cli_reference``."""
    for name, text in cli_reference.pages().items():
        page = ROOT / "docs" / "reference" / name
        assert page.read_text() == text, f"{page} is stale: run python -m petlab.cli_reference"
    cli = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for flag in ("`--grace GRACE`", "`--features FEATURES`", "`--allow-outside-bounds`", "`--eps EPS`"):
        assert flag in cli
    assert "PETLAB_GRACE_SECONDS" in (ROOT / "docs" / "reference" / "environment.md").read_text()


def test_help_formatter_hides_empty_defaults():
    from petlab.subcommands import HelpFormatter, plain

    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    parser.add_argument("--a", default=3, help="three")
    parser.add_argument("--b", help="none")
    parser.add_argument("--c", action="store_true", help="switch")
    text = parser.format_help()
    assert "(default: 3)" in text and "(default: None)" not in text and "(default: False)" not in text
    assert (
        plain("Rows of :data:`COMMANDS` in ``petlab.x``,   spaced") == "Rows of COMMANDS in petlab.x, spaced"
    )
