"""``petlab-synth`` end to end on a tiny generated state: files written, privacy report printed,
clear errors for bad input."""

import json
import re

import pandas as pd
import pytest

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
    assert "epsilon' = 8.5687" in report and "NOT for release" in report
    # suppressed pairs, rejected draws and prior mass are confidential figures
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
    code = main(["plausible", "--runs", "300", "--k", "10", "--omega", "9", "--seed", "2", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr()
    text = printed.out
    written = int(re.search(r"(\d+) records from 300 runs", text)[1])
    assert "Theorem 1" in text and "whole release" in text and "NOT for release" in text
    # the pass rate and candidates are figures of the data, not printed
    assert (
        "pass rate" not in (printed.out + printed.err).lower()
        and "candidates" not in printed.out + printed.err
    )
    from petlab.plaindata import acs_sample_path

    original = pd.read_csv(acs_sample_path())
    synthetic = pd.read_csv(out)
    assert list(synthetic.columns) == list(original.columns) and len(synthetic) == written
    assert 0 < written <= 300


def test_plausible_command_errors(tmp_path, capsys):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    assert main(["plausible", "--data", str(other), "--runs", "5", "--out", str(tmp_path / "o.csv")]) == 2
    assert "--domains" in capsys.readouterr().err
    assert main(["plausible", "--runs", "0", "--out", str(tmp_path / "o.csv")]) == 2
    assert "--runs" in capsys.readouterr().err
    assert main(["plausible", "--runs", "5", "--gamma", "0.5", "--out", str(tmp_path / "o.csv")]) == 2
    assert "gamma" in capsys.readouterr().err
    assert main(["plausible", "--runs", "5", "--abstain", "1", "--out", str(tmp_path / "o.csv")]) == 2
    assert "abstention" in capsys.readouterr().err
    assert main(["plausible", "--runs", "5", "--t", "50", "--out", str(tmp_path / "o.csv")]) == 2
    assert "t must be an integer" in capsys.readouterr().err


def test_plausible_writes_every_passing_record_and_no_failure(tmp_path, capsys):
    """No stopping rule and no failed exit: with few passing records the command still writes what
    passed (possibly nothing) and exits 0; the pass tally goes to --diagnostics only."""
    out, diagnostics = tmp_path / "synthetic.csv", tmp_path / "diag.json"
    argv = ["plausible", "--runs", "50", "--k", "400", "--seed", "2", "--out", str(out)]
    assert main([*argv, "--diagnostics", str(diagnostics)]) == 0
    printed = capsys.readouterr()
    written = int(re.search(r"(\d+) records from 50 runs", printed.out)[1])
    assert len(pd.read_csv(out)) == written
    figures = json.loads(diagnostics.read_text())
    assert figures["confidential"] is True and figures["passed"] == written and figures["candidates"] <= 50


def _edge_geography(tmp_path):
    """A destination d with 3 workers: 2 from a block next to it and 1 from a block either just
    inside the 200-mile edge (199.5 miles north) or just beyond it (200.5): the two inputs differ
    by one worker crossing the edge. Blocks lie on one meridian, so miles are exact."""
    miles = {"d": 0.5, "near": 1.5, "inside": 199.5, "beyond": 200.5, "far": 300.5}
    xwalk = tmp_path / "xwalk.csv"
    pd.DataFrame(
        {"tabblk2010": list(miles), "blklatdd": [m / 69 for m in miles.values()], "blklondd": 0.5 / 69}
    ).to_csv(xwalk, index=False)
    inputs = {}
    for name in ("inside", "beyond"):
        inputs[name] = tmp_path / f"od_{name}.csv"
        pd.DataFrame({"w_geocode": ["d", "d"], "h_geocode": ["near", name], "S000": [2, 1]}).to_csv(
            inputs[name], index=False
        )
    return xwalk, inputs


def test_a_worker_crossing_the_edge_changes_neither_statement_nor_support(tmp_path, capsys):
    """Were the workers beyond the edge dropped, every release with the worker beyond would have 2
    synthetic workers at d, with it inside 3, and the priors and the printed statement would
    differ. Both inputs print the same statement and both reach 2 and 3 (the exact law's support, 0..3 under
    both, is checked in test_onthemap_exact_pipeline.py)."""
    xwalk, inputs = _edge_geography(tmp_path)
    totals, statements = {}, {}
    for name, od in inputs.items():
        totals[name] = set()
        for seed in range(12):
            out = tmp_path / f"synthetic_{name}.csv"
            argv = ["onthemap", "--od", str(od), "--xwalk", str(xwalk), "--out", str(out), "--eps", "1.2"]
            assert main([*argv, "--seed", str(seed)]) == 0
            printed = capsys.readouterr().out
            statements.setdefault(name, set()).add(printed.split("privacy report:")[1])
            totals[name].add(int(pd.read_csv(out).S000.sum()))
    assert statements["inside"] == statements["beyond"] and len(statements["inside"]) == 1
    assert {2, 3} <= totals["inside"] and {2, 3} <= totals["beyond"]
    assert max(totals["inside"] | totals["beyond"]) <= 3


def test_plausible_prints_no_input_count_and_the_same_statement_for_any_input(tmp_path, capsys):
    """Two inputs of different sizes (1,999 and 2,000 records) print the same statement and no
    count of theirs (the number of records written is part of the release, covered)."""
    from petlab.plaindata import acs_sample_path

    sample = pd.read_csv(acs_sample_path())
    printed, statements = [], []
    for name, size in (("smaller", 1999), ("larger", 2000)):
        data = tmp_path / f"{name}.csv"
        sample.iloc[:size].to_csv(data, index=False)
        out = tmp_path / f"synthetic-{name}.csv"
        argv = ["plausible", "--data", str(data), "--runs", "50", "--k", "30", "--omega", "11"]
        assert main([*argv, "--seed", "1", "--out", str(out)]) == 0
        text = capsys.readouterr()
        printed.append(text.out + text.err)
        statements.append(text.out.split("privacy report:")[1])
    assert statements[0] == statements[1]
    for text in printed:
        for figure in ("1999", "1,999", "2000", "2,000", "399", "600", "1000"):  # n, and n x the shares
            # as a number of its own: the progress bar's timing (e.g. "39900.15run/s") is not one
            assert not re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d.,]*\d)", text), figure
    assert "whole release" in statements[0] and "Theorem 1" in statements[0]
    assert "says nothing" not in statements[0]


def test_lodes_errors_name_no_confidential_block(tmp_path):
    from petlab.plaindata.onthemap.commute_data import load_lodes

    od, xwalk = tmp_path / "od.csv", tmp_path / "xwalk.csv"
    pd.DataFrame({"w_geocode": ["270010001001"], "h_geocode": ["279990099999"], "S000": [1]}).to_csv(
        od, index=False
    )
    pd.DataFrame({"tabblk2010": ["270010001001"], "blklatdd": [44.0], "blklondd": [-93.0]}).to_csv(
        xwalk, index=False
    )
    with pytest.raises(ValueError, match="not in the crosswalk") as error:
        load_lodes(od, xwalk)
    assert "279990099999" not in str(error.value) and "1 block" not in str(error.value)


@pytest.mark.parametrize("bad", ["x17", "7.5", "-3", "0", "", "99999999999999999999999"])
@pytest.mark.parametrize("command", ["onthemap", "adaptive"])
def test_a_bad_job_count_is_a_clear_error_that_names_no_value(tmp_path, capsys, command, bad):
    """A job count (S000) that is not a positive integer is refused before anything runs, by a
    message that quotes neither the value (a cell of the confidential file) nor where it is; before,
    onthemap quoted it ("invalid literal for int() with base 10: 'x17'"), truncated 7.5 to 7, and
    adaptive died with a traceback."""
    od, xwalk = tmp_path / "od.csv", tmp_path / "xwalk.csv"
    blocks = ["270010001001", "270010001002", "270010001003"]
    pd.DataFrame({"tabblk2010": blocks, "blklatdd": [44.0, 44.01, 44.02], "blklondd": [-93.0] * 3}).to_csv(
        xwalk, index=False
    )
    counts = ["4", "2", bad]
    pd.DataFrame({"w_geocode": blocks, "h_geocode": blocks[::-1], "S000": counts}).to_csv(od, index=False)
    argv = [command, "--od", str(od), "--xwalk", str(xwalk), "--out", str(tmp_path / "o.csv"), "--seed", "1"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "S000 must be a positive whole number" in captured.err
    assert "privacy report" not in captured.out and "Traceback" not in captured.err
    text = (captured.out + captured.err).replace(str(od), "OD")  # the path's own digits
    for figure in {bad, "17", "7.5", "-3", "line", "row 3", "1 pair"} - {"", "0"}:  # "0": S000
        assert figure not in text, figure
