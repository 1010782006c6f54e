import gzip

import numpy as np
import pandas as pd
import pytest

from petlab.plaindata.onthemap.commute_data import generate, haversine_miles, load_lodes


def test_haversine_by_hand():
    assert haversine_miles(0, 0, 0, 1) == pytest.approx(69.09, abs=0.05)  # one degree on the equator
    assert haversine_miles(45, -93, 45, -93) == 0


def test_loader_joins_both_ends(tmp_path):
    od = tmp_path / "mn_od_main_JT00_2019.csv.gz"
    with gzip.open(od, "wt") as handle:
        handle.write("w_geocode,h_geocode,S000,SA01,SA02,SA03,SE01,SE02,SE03,SI01,SI02,SI03,createdate\n")
        handle.write("270530001001000,270530002002000,3,1,1,1,1,1,1,1,1,1,20211018\n")
        handle.write("270530001001000,270530001001000,1,0,1,0,0,1,0,0,0,1,20211018\n")
    xwalk = tmp_path / "mn_xwalk.csv.gz"
    with gzip.open(xwalk, "wt") as handle:
        handle.write("tabblk2010,st,blklatdd,blklondd\n")
        handle.write("270530001001000,27,44.9778,-93.2650\n270530002002000,27,45.0000,-93.2650\n")
    frame = load_lodes(od, xwalk)
    assert frame.S000.tolist() == [3, 1]
    assert frame.miles.iloc[0] == pytest.approx(haversine_miles(44.9778, -93.265, 45.0, -93.265))
    assert frame.miles.iloc[1] == 0
    with gzip.open(xwalk, "wt") as handle:
        handle.write("tabblk2010,blklatdd,blklondd\n270530001001000,44.9778,-93.2650\n")
    with pytest.raises(ValueError, match="not in the crosswalk"):
        load_lodes(od, xwalk)


def test_generator_is_seeded_sparse_and_heavy_tailed(tmp_path):
    data = generate(20000, seed=3)
    again = generate(20000, seed=3)
    assert data.od.equals(again.od) and data.crosswalk.equals(again.crosswalk)
    assert data.od.S000.sum() == 20000
    blocks = len(data.crosswalk)
    assert len(data.od) < 0.01 * blocks * blocks  # sparse O/D matrix
    frame = load_lodes(*data.write(tmp_path))
    miles = np.repeat(frame.miles.to_numpy(), frame.S000.to_numpy())
    median, p99 = np.percentile(miles, [50, 99])
    assert median < 15  # most commutes are short ...
    assert p99 > 3 * median and miles.max() > 50  # ... with a heavy tail
    assert not generate(20000, seed=4).od.equals(data.od)


def test_generator_rejects_nonsense():
    with pytest.raises(ValueError):
        generate(0)
    assert generate(1).od.S000.sum() == 1
    assert isinstance(generate(50, seed=1).od, pd.DataFrame)


def test_command_line(tmp_path, capsys):
    from petlab.plaindata.cli import main

    assert main(["commute-data", "--workers", "3000", "--seed", "1", "--out", str(tmp_path)]) == 0
    assert "3000 workers" in capsys.readouterr().out
    frame = load_lodes(tmp_path / "od_main_JT00.csv.gz", tmp_path / "xwalk.csv.gz")
    assert frame.S000.sum() == 3000
