"""The owner's error budget from ``petlab-server serve --global-p-error`` to the device: the flag
is validated, reaches the compiled circuit (its own cache entry, concrete's cost changes) and
``ModelInfo``, and ``petlab-client`` prints the bound with the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from petlab.client.main import main as client_main
from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.knn.thermo.circuit import circuit_function
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


def test_rounding_is_exact_or_approximate_for_one_thermo_circuit(capsys, monkeypatch):
    """``--rounding``: exact by default, approximate on request; anything else, approximate with
    another family, or approximate with a split evaluation (its partitions truncate exactly) is a
    usage error naming the way out."""
    assert parse_args(SMALL)[0].knn.settings.rounding == "exact"
    assert parse_args([*SMALL, "--rounding", "approximate"])[0].knn.settings.rounding == "approximate"
    for extra, said in [
        (["--rounding", "nearest"], "--rounding: rounding is 'exact' or 'approximate', got 'nearest'"),
        (["--rounding", "approximate", "--algorithm", "fast"], "approximate rounding applies to the thermo"),
        (["--rounding", "approximate", "--partitions", "2"], "--rounding approximate runs one whole circuit"),
    ]:
        with pytest.raises(SystemExit) as exited:
            parse_args([*SMALL, *extra])
        assert exited.value.code == 2
        assert said in capsys.readouterr().err
    monkeypatch.setenv("PETLAB_ROUNDING", "approximate")
    assert parse_args(SMALL)[0].knn.settings.rounding == "approximate"
    monkeypatch.setenv("PETLAB_ROUNDING", "floor")
    with pytest.raises(BadInput, match="PETLAB_ROUNDING"):
        parse_args(SMALL)


def test_the_budget_and_rounding_reach_the_circuit_model_info_and_the_device(tmp_path, capsys, keyed_model):
    """Beside the shared Wine n = 6 circuit at the family's budget (thermo: 1e-4) and exact
    truncation (its default distance drops 1 bit of each of the 6 distances), a server started with
    ``--global-p-error 0.1 --rounding approximate`` compiles the same model under another cache
    key, into a circuit concrete compiled at the larger budget, without the 6 truncation lookups
    and cheaper, and says 0.1 and approximate in ModelInfo, which the device prints as a budget
    that does not bound the answers."""
    shared, _ = keyed_model("wine", KnnSettings(n=6))  # compiled for other tests too
    argv = ["serve", "--model", "wine", "--n", "6", "--port", "0", "--global-p-error", "0.1"]
    loose, _ = parse_args([*argv, "--rounding", "approximate"])
    running = start(replace(loose, data_dir=tmp_path))
    try:
        hosted = running.hosted["wine"]
        assert (shared.info().global_p_error, hosted.info().global_p_error) == (1e-4, 0.1)
        assert (shared.info().rounding, hosted.info().rounding) == ("exact", "approximate")
        keys = {m.cache_key(m.circuit_config()) for m in (shared.model, hosted.model)}
        assert len(keys) == 2 and {p.name for p in (tmp_path / "models").iterdir() if p.is_dir()} <= keys
        # concrete compiled at the owner's budget (its own figure is at most the budget asked for,
        # above the family's 1e-4), with one truncation lookup less per point, at less cost
        assert 1e-4 < hosted.server.global_p_error <= 0.1
        assert shared.server.global_p_error <= 1e-4
        shift = hosted.model.plan.spec.shift
        assert shift == 1
        name = circuit_function(hosted.model.plan).__name__  # concrete names the circuit after it
        pbs = [m.server.programmable_bootstrap_count(name) for m in (shared, hosted)]
        assert pbs[1] == pbs[0] - shift * hosted.model.plan.n
        assert hosted.server.complexity < shared.server.complexity
        assert client_main(["models", "--server", f"127.0.0.1:{running.port}"]) == 0
    finally:
        running.stop(grace=1)
    said = "model 'wine' rounds its distances approximately: an answer may differ from the clear k-NN answer "
    assert said in capsys.readouterr().out
