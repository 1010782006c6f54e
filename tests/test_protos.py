"""The committed stubs must be exactly what the .proto files generate."""

from pathlib import Path

from protos.generate import PROTOS, generate


def test_generated_stubs_are_up_to_date(tmp_path):
    sources = generate(tmp_path)
    assert sources, "no .proto files found"
    for source in sources:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            name = source.stem + suffix
            fresh = (tmp_path / "protos" / name).read_text()
            committed = Path(PROTOS / name)
            assert committed.is_file(), f"{name} is not committed; run python -m protos.generate"
            assert committed.read_text() == fresh, f"{name} is stale; run python -m protos.generate"


def test_services_are_versioned():
    for source in PROTOS.glob("*.proto"):
        assert "package petlab." in source.read_text() and ".v1;" in source.read_text()
