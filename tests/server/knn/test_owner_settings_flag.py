"""``petlab-server serve --owner-settings``: each bundled model is built with its owner's measured
settings (``server.knn.datasets.owner_settings``), a CSV model with the flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from petlab.server.knn import startup
from petlab.server.knn.datasets import owner_settings
from petlab.server.main import parse_args


class Built(Exception):
    """Raised by the stand-in for ``build_model``: the settings are known, nothing compiles."""


def settings_built(monkeypatch, argv: list[str], tmp_path: Path) -> dict:
    options, _ = parse_args(["serve", "--port", "0", "--data-dir", str(tmp_path), *argv])
    seen: dict = {}

    def build_model(name, features, labels, settings, *args, **kwargs):
        seen[name] = settings
        raise Built

    monkeypatch.setattr(startup, "build_model", build_model)
    with pytest.raises(Built):
        startup.load_models(options.knn, tmp_path)
    return seen


@pytest.mark.parametrize("name", ["wine", "breast_cancer"])
def test_owner_settings_build_a_bundled_model_with_its_measured_settings(monkeypatch, tmp_path, name):
    seen = settings_built(monkeypatch, ["--model", name, "--owner-settings", "--n", "6"], tmp_path)
    assert seen[name] == owner_settings(name)
    flags = settings_built(monkeypatch, ["--model", name, "--n", "6"], tmp_path)
    assert flags[name].n == 6 and flags[name] != owner_settings(name)


def test_a_csv_model_keeps_the_flags_settings(monkeypatch, tmp_path):
    rows = tmp_path / "points.csv"
    rows.write_text("a,b,label\n" + "".join(f"{i % 5},{i % 3},{i % 2}\n" for i in range(40)))
    bounds = tmp_path / "bounds.csv"
    bounds.write_text("feature,low,high\na,0,4\nb,0,2\n")
    argv = ["--model", f"mine={rows}", "--bounds", f"mine={bounds}", "--owner-settings", "--n", "6"]
    seen = settings_built(monkeypatch, argv, tmp_path)
    assert seen["mine"].n == 6
