"""The machine and software an experiment ran on (stated on every table and figure)."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("concrete-python", "phe", "grpcio", "numpy", "scikit-learn", "opendp")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def software() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def describe() -> str:
    """One line: cores, CPU model, OS, and the versions that matter."""
    versions = ", ".join(f"{k} {v}" for k, v in software().items())
    return f"{os.cpu_count()} cores, {cpu_model()}, {platform.system()} {platform.release()}; {versions}"
