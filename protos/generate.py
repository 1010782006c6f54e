"""Regenerate the Python stubs from the .proto files: ``python -m petlab.protos.generate``.

The .proto files live in ``protos/`` and are compiled as ``petlab/protos/<name>.proto``, so the
descriptors are registered under that path (no clash with another project's ``knn.proto``) and the
generated gRPC modules import their messages as ``petlab.protos.<name>_pb2``.
``tests/protos/test_protos.py`` fails when the committed stubs differ from what this produces, so edit a
.proto, run this, and commit both.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTOS = Path(__file__).resolve().parent
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out_dir: Path = PROTOS) -> list[Path]:
    """Write ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` for every .proto into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = sorted(PROTOS.glob("*.proto"))
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        package = root / "petlab" / "protos"
        package.mkdir(parents=True)
        for source in sources:
            shutil.copyfile(source, package / source.name)
        for source in sources:
            relative = f"petlab/protos/{source.name}"
            args = [
                "protoc",
                f"-I{root}",
                f"--python_out={root}",
                f"--pyi_out={root}",
                f"--grpc_python_out={root}",
                relative,
            ]
            if protoc.main(args) != 0:
                raise RuntimeError(f"protoc failed on {relative}")
            for suffix in SUFFIXES:
                name = source.stem + suffix
                shutil.copyfile(package / name, out_dir / name)
    return sources


if __name__ == "__main__":
    generate()
    sys.exit(0)
