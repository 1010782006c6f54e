"""Run mypy over the whole ``petlab`` namespace as it is installed.

The design keeps its top-level folders (``crypto/``, ``server/``, ...) and maps them to ``petlab.*``
with setuptools' ``package-dir`` (pyproject.toml). mypy does not follow that mapping (nor the
editable install's import hook), so this script mirrors it with symbolic links in ``build/typecheck``
-- ``build/typecheck/petlab/crypto -> crypto/`` and so on, read from pyproject.toml so the mapping
has one definition -- and runs mypy on that tree with the settings in ``[tool.mypy]``.

Usage: ``python tools/typecheck.py [extra mypy arguments]`` (``make lint`` and pre-commit run it).
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"


def link_tree() -> Path:
    """(Re)build ``build/typecheck/petlab`` from ``[tool.setuptools.package-dir]``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = config["package-dir"]
    root_package = mapping.pop("petlab")
    if TREE.exists():
        shutil.rmtree(TREE)
    package = TREE / "petlab"
    package.mkdir(parents=True)
    for entry in (ROOT / root_package).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        (TREE / name.replace(".", os.sep)).symlink_to(ROOT / folder, target_is_directory=True)
    return package


def main(argv: list[str] | None = None) -> int:
    from mypy import api

    package = link_tree()
    stdout, stderr, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), str(package), *(argv or sys.argv[1:])]
    )
    # report paths as the checkout's real files, not the link tree's
    prefix = str(package.relative_to(ROOT)) + os.sep
    for folder_name, folder in _folders().items():
        stdout = stdout.replace(prefix + folder_name + os.sep, folder + os.sep)
    sys.stdout.write(stdout.replace(prefix, "petlab" + os.sep))
    sys.stderr.write(stderr)
    return status


def _folders() -> dict[str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name.split(".", 1)[1]: folder for name, folder in config["package-dir"].items() if "." in name}


if __name__ == "__main__":
    sys.exit(main())
