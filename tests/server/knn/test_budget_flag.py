"""The owner's error budget from ``petlab-server serve --global-p-error`` to the device: the flag
is validated, reaches the compiled circuit (its own cache entry, concrete's cost changes) and
``ModelInfo``, and ``petlab-client`` prints the bound with the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from petlab.client.main import main as client_main
from petlab.crypto.knn.model import KnnSettings
from petlab.server.app import start
from petlab.server.common.environment import BadInput
from petlab.server.main import parse_args

# Iris with 6 points: a circuit of a few dozen lookups, compiled in about a second
SMALL = ["serve", "--model", "iris", "--n", "6", "--port", "0"]


@pytest.mark.parametrize("value", ["0", "1", "-0.1", "1.5", "nan", "inf", "x"])
def test_a_budget_that_is_not_a_probability_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args([*SMALL, "--global-p-error", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert (
        f"--global-p-error: the error budget must be a probability strictly between 0 and 1, got '{value}'"
        in err
    )


def test_the_environment_default_is_validated_too(monkeypatch):
    monkeypatch.setenv("PETLAB_GLOBAL_P_ERROR", "0.001")
    options, _ = parse_args(SMALL)
    assert options.knn.settings.global_p_error == 0.001
    monkeypatch.setenv("PETLAB_GLOBAL_P_ERROR", "2")
    with pytest.raises(BadInput, match="PETLAB_GLOBAL_P_ERROR"):
        parse_args(SMALL)


def test_the_budget_reaches_the_circuit_model_info_and_the_device(tmp_path, capsys, keyed_model):
    """Beside the shared Wine n = 6 circuit at the family's budget (thermo: 1e-4), a server started
    with ``--global-p-error 0.1`` compiles the same model under another cache key, into a circuit
    concrete costs less, and says 0.1 in ModelInfo, which the device prints as the bound on a
    wrong answer."""
    shared, _ = keyed_model("wine", KnnSettings(n=6))  # compiled for other tests too
    loose, _ = parse_args(["serve", "--model", "wine", "--n", "6", "--port", "0", "--global-p-error", "0.1"])
    running = start(replace(loose, data_dir=tmp_path))
    try:
        hosted = running.hosted["wine"]
        assert (shared.info().global_p_error, hosted.info().global_p_error) == (1e-4, 0.1)
        keys = {m.cache_key(m.circuit_config()) for m in (shared.model, hosted.model)}
        assert len(keys) == 2 and {p.name for p in (tmp_path / "models").iterdir() if p.is_dir()} <= keys
        # the same circuit under smaller parameters: concrete's cost and the key size fall
        assert hosted.server.complexity < shared.server.complexity
        assert hosted.server.size_of_bootstrap_keys < shared.server.size_of_bootstrap_keys
        assert client_main(["models", "--server", f"127.0.0.1:{running.port}"]) == 0
    finally:
        running.stop(grace=1)
    said = "each answer equals the clear k-NN answer of model 'wine' except with probability at most 0.1 "
    assert said in capsys.readouterr().out
