"""The server's options: one frozen type per room, each default stated once (the flags take
theirs from the fields), and ``ServerOptions.of`` gives each field name to the one room that
declares it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from petlab.server.app import ROOMS, ServerOptions
from petlab.server.common.options import DEFAULT_DATA_DIR
from petlab.server.main import parse_args


def test_the_flags_defaults_are_the_rooms_defaults(monkeypatch):
    for variable in [name for name in os.environ if name.startswith("PETLAB_")]:
        monkeypatch.delenv(variable)
    options, _ = parse_args(["serve"])
    assert options == ServerOptions(DEFAULT_DATA_DIR)


def test_every_option_belongs_to_one_room_and_of_routes_it():
    names = [f.name for kind in ROOMS.values() for f in dataclasses.fields(kind)]
    assert len(names) == len(set(names))  # no field name in two rooms
    options = ServerOptions.of(
        Path("d"), port=0, models=["iris"], analysis_cooldown_seconds=5.0, enable_paillier_baseline=True
    )
    assert (options.common.port, options.knn.models) == (0, ["iris"])
    assert options.controller.analysis_cooldown_seconds == 5.0 and options.paillier.enable_paillier_baseline
    assert options.knn.settings == ServerOptions(Path("d")).knn.settings
    with pytest.raises(TypeError, match="no_such_option"):
        ServerOptions.of(Path("d"), no_such_option=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.knn.partitions = 2  # type: ignore[misc]
