"""The server uses grpc's public API only: no module of petlab imports grpc's private modules
(``grpc._server``, ``grpc._channel``, ...), whose behaviour may change in any release. The stubs
that grpc's own code generator writes (``*_pb2_grpc.py``: a version check) are grpc's, not ours."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ROOMS = ("server", "client", "crypto", "plaindata", "experiments", "protos", "petlab")


def private_grpc_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "grpc" and any(part.startswith("_") for part in parts[1:]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_no_module_imports_grpcs_private_modules():
    files = [
        path
        for room in ROOMS
        for path in (ROOT / room).rglob("*.py")
        if not path.is_symlink() and not path.name.endswith("_pb2_grpc.py")
    ]
    assert len(files) > 100
    assert [line for path in files for line in private_grpc_imports(path)] == []


def test_the_check_finds_a_private_import(tmp_path):
    module = ROOT / "server" / "common" / "health.py"
    assert private_grpc_imports(module) == []
    probe = ROOT / "server" / "common" / "_probe_private_import.py"
    try:
        probe.write_text("from grpc import _server\nimport grpc._channel\n")
        assert len(private_grpc_imports(probe)) == 2
    finally:
        probe.unlink()
