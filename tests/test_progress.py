"""Progress on stderr: a tqdm bar on a terminal; elsewhere (a log file, a pipe, CI) plain lines, one
per stage, and never a carriage return (a redrawn bar leaves its every frame behind there)."""

from __future__ import annotations

import numpy as np
import pytest
from tqdm import tqdm

from petlab import progress


def test_without_a_terminal_stages_are_plain_lines(capsys):
    assert not progress.is_terminal()  # pytest captures stderr: not a terminal
    with progress.bar(total=4, desc="experiments", unit="step") as shown:
        shown.set_postfix_str("k-NN on iris")
        shown.update(3)
        shown.set_postfix_str("k-NN on iris")  # the same stage: no new line
        shown.set_postfix_str("OnTheMap")
        shown.update()
    assert list(progress.bar(range(3), desc="data sets")) == [0, 1, 2]
    assert [int(v) for v in progress.bar(np.arange(3), desc="queries")] == [0, 1, 2]  # an array too
    progress.say("the server is busy; asking again in 5 s")
    with progress.bar(total=2, desc="quiet", disable=True) as quiet:
        quiet.set_postfix_str("never shown")
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    assert err.splitlines() == [
        "experiments ...",
        "experiments: k-NN on iris (0/4 steps done)",
        "experiments: OnTheMap (3/4 steps done)",
        "data sets ...",
        "queries ...",
        "the server is busy; asking again in 5 s",
    ]


def test_on_a_terminal_it_is_tqdm(monkeypatch):
    monkeypatch.setattr(progress, "is_terminal", lambda stream=None: True)
    shown = progress.bar(total=2, desc="uploading", disable=True)
    assert isinstance(shown, tqdm)
    shown.close()


@pytest.mark.parametrize("argv", [["serve", "--no-such-flag"]])
def test_the_server_says_it_is_starting_before_the_silent_seconds(argv, caplog):
    from petlab.server import main as server_main

    with caplog.at_level("INFO", logger="petlab.server"), pytest.raises(SystemExit):
        server_main.main(argv)
    assert "starting: loading the models and the encryption library" in caplog.text
