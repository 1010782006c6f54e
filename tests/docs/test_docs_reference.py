"""The committed gRPC reference page is what tools/grpc_reference.py writes from protos/*.proto."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grpc_reference", ROOT / "tools" / "grpc_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grpc_reference_page_matches_the_protos() -> None:
    tool = generator()
    assert tool.PAGE.read_text() == tool.render(), (
        "docs/reference/grpc-api.md is stale: run `python tools/grpc_reference.py`"
    )


def test_grpc_reference_names_every_rpc_and_message_with_its_comment() -> None:
    page = generator().render()
    for proto in (ROOT / "protos").glob("*.proto"):
        for line in proto.read_text().splitlines():
            words = line.split()
            if words[:1] == ["rpc"]:
                assert f"| `{words[1].split('(')[0]}` |" in page
            elif words[:1] == ["message"]:
                assert f"### {words[1]}" in page
    assert "The models this server hosts: public information only" in page  # a method's comment
