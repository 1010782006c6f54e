"""The committed stubs must be exactly what the .proto files generate."""

from pathlib import Path

from google.protobuf import descriptor_pool

from petlab.protos import knn_pb2  # noqa: F401  (registers the descriptor)
from petlab.protos.generate import PROTOS, SUFFIXES, generate


def test_generated_stubs_are_up_to_date(tmp_path):
    sources = generate(tmp_path)
    assert sources, "no .proto files found"
    for source in sources:
        for suffix in SUFFIXES:
            name = source.stem + suffix
            fresh = (tmp_path / name).read_text()
            committed = Path(PROTOS / name)
            assert committed.is_file(), f"{name} is not committed; run python -m petlab.protos.generate"
            assert committed.read_text() == fresh, f"{name} is stale; run python -m petlab.protos.generate"


def test_services_are_versioned():
    for source in PROTOS.glob("*.proto"):
        assert "package petlab." in source.read_text() and ".v1;" in source.read_text()


def test_descriptors_are_registered_under_the_petlab_namespace():
    pool = descriptor_pool.Default()
    assert pool.FindFileByName("petlab/protos/knn.proto").package == "petlab.knn.v1"
    for generic in ("protos/knn.proto", "knn.proto"):
        try:
            pool.FindFileByName(generic)
        except KeyError:
            continue
        raise AssertionError(f"{generic} is registered: descriptors must live under petlab/")
