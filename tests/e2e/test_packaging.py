"""The wheel holds only the ``petlab`` namespace, with its data files, and works installed.

The wheel is built from this checkout without network (``pip wheel --no-deps
--no-build-isolation``), installed with ``--no-deps`` into a fresh virtual environment outside the
checkout, and the console scripts are run from that environment's ``bin/`` with the working
directory outside the checkout. The heavy dependencies (concrete-python, torch, ...) are not
reinstalled: a ``.pth`` file appends this environment's site-packages to the fresh one's
``sys.path``. Appended paths do not run their own ``.pth`` files, so this environment's editable
import hook for ``petlab`` stays inactive, and the test checks that ``petlab`` is imported from the
fresh environment, never from the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = sorted(PYPROJECT["project"]["scripts"])
COPY_IGNORES = (
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".petlab-cache",
    "results",
)

pytestmark = pytest.mark.slow


def _package_data_files() -> set[str]:
    """Every non-Python file in a package folder, as its path inside the wheel."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    expected = set()
    for package in setuptools["packages"]:
        # the longest package-dir prefix maps the package to its folder
        prefix = max(
            (p for p in setuptools["package-dir"] if package == p or package.startswith(p + ".")), key=len
        )
        folder = (
            ROOT / setuptools["package-dir"][prefix] / package[len(prefix) :].lstrip(".").replace(".", "/")
        )
        for path in folder.iterdir():
            if path.is_file() and path.suffix not in {".py", ".pyc"}:
                expected.add(package.replace(".", "/") + "/" + path.name)
    return expected


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of the checkout, so no stale ``build/`` folder can supply missing files."""
    source = tmp_path_factory.mktemp("source") / "petlab"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*command, "-w", str(out), str(source)], check=True, capture_output=True)
    (built,) = out.glob("petlab-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv (no system site-packages, no pip) with only the wheel installed in it."""
    home = tmp_path_factory.mktemp("clean-venv")
    venv.create(home / "venv", with_pip=False, system_site_packages=False)
    python = home / "venv" / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "petlab-test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return home


def _run(home: Path, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    return subprocess.run(
        [str(home / "venv" / "bin" / command[0]), *command[1:]],
        cwd=home,
        env={**env, "HOME": str(home), "PETLAB_CACHE_DIR": str(home / "cache")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_wheel_holds_only_the_petlab_namespace_and_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    version = PYPROJECT["project"]["version"]
    assert {n.split("/")[0] for n in names} == {"petlab", f"petlab-{version}.dist-info"}
    assert _package_data_files() <= set(names), "package data missing from the wheel"
    for needed in ("petlab/py.typed", "petlab/protos/knn.proto", "petlab/protos/knn_pb2.pyi"):
        assert needed in names
    assert f"petlab-{version}.dist-info/licenses/LICENSE" in names
    assert not [n for n in names if "__pycache__" in n or n.startswith("petlab/tests")]
    entry_points = zipfile.ZipFile(wheel).read(f"petlab-{version}.dist-info/entry_points.txt").decode()
    assert all(f"{script} = petlab." in entry_points for script in SCRIPTS)


def test_installed_package_comes_from_the_clean_venv(installed):
    result = _run(
        installed, "python", "-c", "import petlab, petlab.protos.knn_pb2 as k; print(petlab.__file__)"
    )
    assert result.returncode == 0, result.stderr
    location = Path(result.stdout.strip())
    assert location.is_relative_to(installed / "venv"), location
    assert not location.is_relative_to(ROOT)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_console_script_answers_help(installed, script):
    result = _run(installed, script, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_a_small_job_runs_from_the_installed_wheel(installed):
    out = installed / "commute"
    result = _run(
        installed, "petlab-synth", "commute-data", "--workers", "200", "--seed", "1", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()), "commute-data wrote nothing"


def test_plausible_bench_names_a_missing_data_file(installed):
    missing = installed / "no-such.csv"
    result = _run(
        installed, "petlab-experiments", "plausible-bench", "--data", str(missing), "--candidates", "10"
    )
    assert result.returncode == 2
    assert f"petlab-experiments: error: {missing}: No such file or directory; --data names" in result.stderr
