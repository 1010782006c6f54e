"""Regenerate the Python stubs from the .proto files: ``python -m protos.generate``.

Run from the repository root. ``tests/test_protos.py`` fails when the committed stubs differ from
what this produces, so edit a .proto, run this, and commit both.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

PROTOS = Path(__file__).resolve().parent
ROOT = PROTOS.parent


def generate(out_dir: Path = ROOT) -> list[Path]:
    """Write ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` under ``out_dir/protos``."""
    (out_dir / "protos").mkdir(parents=True, exist_ok=True)
    sources = sorted(PROTOS.glob("*.proto"))
    for source in sources:
        relative = source.relative_to(ROOT)
        args = [
            "protoc",
            f"-I{ROOT}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(relative),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {relative}")
    return sources


if __name__ == "__main__":
    generate()
    sys.exit(0)
