"""``petlab-experiments demo``: its client command lines parse for both protocols (the baseline's
ended in a usage error), and a server or client that fails ends the demo in one line, not a
traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from petlab.client import main as client_main
from petlab.errors import PetlabError, Unavailable
from petlab.experiments import grpc_demo


@pytest.mark.parametrize("protocol", ["classify", "paillier-classify"])
def test_the_demo_client_command_lines_parse(protocol, tmp_path):
    rows, stats = tmp_path / "rows.csv", tmp_path / "s.json"
    argv = grpc_demo.client_command(protocol, 50051, rows, stats, tmp_path / "c")
    assert Path(argv[0]).name == "petlab-client"
    args = client_main.build_parser().parse_args(argv[1:])
    assert (args.command, args.cache_dir, args.model) == (protocol, tmp_path / "c", "iris")


def test_a_failing_client_or_server_is_one_error(tmp_path, monkeypatch):
    client = tmp_path / "petlab-client"
    client.write_text("#!/bin/sh\necho 'petlab-client: error: something' >&2\nexit 2\n")
    client.chmod(0o755)
    monkeypatch.setattr(grpc_demo, "BIN", tmp_path)
    with pytest.raises(PetlabError, match="petlab-client paillier-classify exited with status 2"):
        grpc_demo.run_client("paillier-classify", 1, tmp_path / "r.csv", tmp_path / "s.json", tmp_path)
    server = subprocess.Popen(["sh", "-c", "exit 3"])
    server.wait()
    with pytest.raises(Unavailable, match="petlab-server exited with status 3"):
        grpc_demo.wait_until_serving(server, tmp_path / "port", timeout=10)
