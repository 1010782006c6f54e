"""``petlab-synth`` end to end on a tiny generated state: files written, privacy report printed,
clear errors for bad input."""

import pandas as pd
from petlab.plaindata.cli import main


def test_onthemap_and_adaptive_commands(tmp_path, capsys):
    assert main(["commute-data", "--workers", "800", "--seed", "4", "--out", str(tmp_path)]) == 0
    od, xwalk = tmp_path / "od_main_JT00.csv.gz", tmp_path / "xwalk.csv.gz"
    common = ["--od", str(od), "--xwalk", str(xwalk), "--seed", "1"]
    assert main(["onthemap", *common, "--out", str(tmp_path / "otm.csv.gz")]) == 0
    report = capsys.readouterr().out
    assert "epsilon' = 8.5686" in report and "NOT for release" in report
    synthetic = pd.read_csv(tmp_path / "otm.csv.gz", dtype={"w_geocode": str, "h_geocode": str})
    original = pd.read_csv(od, dtype={"w_geocode": str, "h_geocode": str})
    assert list(synthetic.columns) == ["w_geocode", "h_geocode", "S000"]
    assert set(synthetic.w_geocode) <= set(original.w_geocode)
    assert abs(synthetic.S000.sum() - original.S000.sum()) <= 10  # only pairs past 200 miles are dropped
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
    text = capsys.readouterr().out
    assert "300 records released" in text and "Theorem 1" in text and "NOT for release" in text
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
