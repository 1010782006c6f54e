"""``petlab-synth`` end to end on a tiny generated state: files written, privacy report printed,
clear errors for bad input."""

import json

import pandas as pd

from petlab.plaindata.cli import main


def test_onthemap_and_adaptive_commands(tmp_path, capsys):
    assert main(["commute-data", "--workers", "800", "--seed", "4", "--out", str(tmp_path)]) == 0
    od, xwalk = tmp_path / "od_main_JT00.csv.gz", tmp_path / "xwalk.csv.gz"
    common = ["--od", str(od), "--xwalk", str(xwalk), "--seed", "1"]
    diagnostics = tmp_path / "diag" / "otm.json"
    assert (
        main(["onthemap", *common, "--out", str(tmp_path / "otm.csv.gz"), "--diagnostics", str(diagnostics)])
        == 0
    )
    printed = capsys.readouterr()
    report = printed.out
    assert "epsilon' = 8.5686" in report and "NOT for release" in report
    # issue 16: suppressed pairs, rejected draws and prior mass are confidential figures
    for confidential in ("suppressed", "rejected", "prior mass", "no real commuter"):
        assert confidential not in (printed.out + printed.err).lower()
    figures = json.loads(diagnostics.read_text())
    assert figures["confidential"] is True and "beyond_pairs" in figures and "rejected_draws" in figures
    assert diagnostics.stat().st_mode & 0o777 == 0o600
    synthetic = pd.read_csv(tmp_path / "otm.csv.gz", dtype={"w_geocode": str, "h_geocode": str})
    original = pd.read_csv(od, dtype={"w_geocode": str, "h_geocode": str})
    assert list(synthetic.columns) == ["w_geocode", "h_geocode", "S000"]
    assert set(synthetic.w_geocode) <= set(original.w_geocode)
    # N(d) synthetic workers per destination; only those drawn beyond 200 miles are not written
    assert abs(synthetic.S000.sum() - original.S000.sum()) <= 10
    for method in ("basic", "improved", "direct"):
        out = tmp_path / f"{method}.csv"
        assert (
            main(["adaptive", *common, "--method", method, "--eps", "2", "--depth", "4", "--out", str(out)])
            == 0
        )
        assert "epsilon" in capsys.readouterr().out
        assert pd.read_csv(out).S000.sum() > 0


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    assert main(["onthemap", "--od", str(tmp_path / "none.csv"), "--xwalk", "x", "--out", "o.csv"]) == 2
    assert "No such file" in capsys.readouterr().err
    (tmp_path / "od.csv").write_text("a,b\n1,2\n")
    (tmp_path / "x.csv").write_text("tabblk2010,blklatdd,blklondd\n1,44,-93\n")
    assert (
        main(["onthemap", "--od", str(tmp_path / "od.csv"), "--xwalk", str(tmp_path / "x.csv"), "--out", "o"])
        == 2
    )
    assert "not a LODES O/D file" in capsys.readouterr().err


def test_plausible_command(tmp_path, capsys):
    out = tmp_path / "synthetic.csv"
    code = main(
        ["plausible", "--count", "300", "--k", "10", "--omega", "9", "--seed", "2", "--out", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr()
    text = printed.out
    assert "300 records" in text and "Theorem 1" in text and "NOT for release" in text
    # issue 16: the candidate count and pass rate are not covered by Theorem 1
    assert "pass" not in (printed.out + printed.err).lower() and "candidates" not in printed.out + printed.err
    from petlab.plaindata import acs_sample_path

    original = pd.read_csv(acs_sample_path())
    synthetic = pd.read_csv(out)
    assert list(synthetic.columns) == list(original.columns) and len(synthetic) == 300


def test_plausible_command_errors(tmp_path, capsys):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    assert main(["plausible", "--data", str(other), "--count", "5", "--out", str(tmp_path / "o.csv")]) == 2
    assert "--domains" in capsys.readouterr().err
    assert main(["plausible", "--count", "0", "--out", str(tmp_path / "o.csv")]) == 2
    assert "--count" in capsys.readouterr().err
    assert main(["plausible", "--count", "5", "--gamma", "0.5", "--out", str(tmp_path / "o.csv")]) == 2
    assert "gamma" in capsys.readouterr().err


def test_plausible_releases_nothing_when_the_budget_runs_out(tmp_path, capsys):
    """Theorem 1 covers each released record, not how many passed: when fewer than --count pass
    within the candidate budget, nothing is written, and the figures go to --diagnostics only."""
    out, diagnostics = tmp_path / "synthetic.csv", tmp_path / "diag.json"
    code = main(
        [
            "plausible",
            "--count",
            "300",
            "--k",
            "10",
            "--seed",
            "2",
            "--max-candidates",
            "50",
            "--out",
            str(out),
            "--diagnostics",
            str(diagnostics),
        ]
    )
    printed = capsys.readouterr()
    assert code == 1 and not out.exists() and "nothing was released" in printed.err
    assert not any(ch.isdigit() for ch in printed.err.split("nothing was released")[0].split("--count")[-1])
    figures = json.loads(diagnostics.read_text())
    assert figures["confidential"] is True and figures["candidates"] == 50
