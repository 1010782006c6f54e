"""Fixtures of the controller's tests. Each module starts its own ``server`` (its own limits);
``channel`` connects to the module's server over loopback and is closed after the test."""

from __future__ import annotations

import pytest

from petlab.client.knn_client import make_channel


@pytest.fixture()
def channel(server):
    with make_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel
