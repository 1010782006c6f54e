"""A pytest plugin: the test session's status survives concrete's runtime (``petlab.exit_status``).

Without it, a session in which any test ran a circuit exits 0 even when tests failed, and
``make test`` (CI) would pass. Enabled for the project's tests in ``pyproject.toml``
(``-p petlab.pytest_exit_status``); ``tests/e2e/test_cli_entry_points.py`` shows both sides.
"""

from __future__ import annotations

import pytest

from petlab.exit_status import exit_with

_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After every other plugin has finished (the summary is printed), end a failed session with
    its status through ``os._exit``."""
    status = config.stash.get(_STATUS, 0)
    if status:
        exit_with(status)
