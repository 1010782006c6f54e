"""The command-line programs as a user runs them: their own output only (no dependency's
deprecation warning), every subcommand reachable through ``python -m``, tables not chains."""

import importlib
import subprocess
import sys

import pytest

from petlab.experiments.cli import EXPERIMENTS
from petlab.server.main import COMMANDS
from petlab.subcommands import build_parser


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)


def test_client_classify_through_python_m_prints_only_its_own_lines(tmp_path):
    """``python -m petlab.client.main classify`` reaches the network code (it used to die on a
    NameError for a helper defined after the ``__main__`` guard) and stderr holds one line of its
    own: no setuptools warning printed by concrete-python's import."""
    done = _run(
        "-m", "petlab.client.main", "classify", "--server", "127.0.0.1:1", "--model", "iris",
        "--features", "1,2,3,4", "--timeout", "2", "--cache-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("petlab-client: UNAVAILABLE") and len(done.stderr.splitlines()) == 1
    assert "pkg_resources" not in done.stderr and "NameError" not in done.stderr


def test_server_start_failure_prints_no_dependency_warning(tmp_path):
    done = _run("-m", "petlab.server.main", "serve", "--data-dir", str(tmp_path), "--model", "nope")
    assert done.returncode == 2
    assert "unknown data set 'nope'" in done.stderr and "pkg_resources" not in done.stderr


@pytest.mark.parametrize(
    ("prog", "table"), [("petlab-server", COMMANDS), ("petlab-experiments", EXPERIMENTS)]
)
def test_every_subcommand_row_names_a_module_with_arguments_and_run(prog, table):
    for row in table:
        args = build_parser(prog, None, table, [row.name]).parse_args([row.name])
        assert args.subcommand is row and callable(importlib.import_module(row.module).run)
