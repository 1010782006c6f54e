"""ModelInfo publishes public bounds only, never the training set's own extremes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from petlab.crypto.knn.model import KnnSettings
from petlab.server.knn.datasets import bundled_public_bounds, load_bounds_file, load_bundled
from petlab.server.knn.options import KnnOptions
from petlab.server.knn.startup import load_models
from petlab.server.main import parse_args


def _csv(tmp_path, rng) -> tuple:
    features = rng.normal(size=(30, 2)) * [3.0, 7.0] + [10.0, -4.0]
    labels = (features[:, 0] > 10).astype(int)
    frame = pd.DataFrame({"a": features[:, 0], "b": features[:, 1], "label": labels})
    path = tmp_path / "owner.csv"
    frame.to_csv(path, index=False)
    return path, features


def test_csv_model_publishes_the_bounds_file_not_its_training_extremes(tmp_path):
    """Attack: were ModelInfo's feature_lows/highs the training set's exact per-feature minima and
    maxima, each would typically be one person's value. A CSV model needs a public bounds file,
    and that is what is published."""
    path, features = _csv(tmp_path, np.random.default_rng(3))
    settings = KnnSettings(n=4, k=1, algorithm="fast")
    options = KnnOptions(models=[f"owner={path}"], settings=settings)
    with pytest.raises(ValueError, match="--bounds owner=FILE"):
        load_models(options, tmp_path / "srv")
    bounds = tmp_path / "bounds.csv"
    bounds.write_text("feature,low,high\nb,-30,20\na,0,25\n")
    options = replace(options, bounds={"owner": bounds})
    hosted = load_models(options, tmp_path / "srv")["owner"]
    info = hosted.info()
    assert list(info.feature_lows) == [0.0, -30.0] and list(info.feature_highs) == [25.0, 20.0]
    published = set(info.feature_lows) | set(info.feature_highs)
    assert not published & (set(features.min(axis=0)) | set(features.max(axis=0)))
    hosted.server.cleanup()


def test_bundled_bounds_are_the_published_ranges(tmp_path):
    full = load_bundled("iris")
    lows, highs = bundled_public_bounds("iris")
    np.testing.assert_array_equal(lows, full.features.min(axis=0))
    np.testing.assert_array_equal(highs, full.features.max(axis=0))
    lows, highs = bundled_public_bounds("digits")
    assert set(lows) == {0.0} and set(highs) == {16.0}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("feature,low,high\na,0,1\n", "missing"),
        ("feature,low,high\na,0,1\nb,2,1\n", "low < high"),
        ("feature,low,high\na,0,1\nb,0,inf\n", "finite"),
        ("name,lo,hi\na,0,1\nb,0,1\n", "columns"),
        ("feature,low,high\na,0,1\na,0,2\nb,0,1\n", "exactly one row"),
    ],
)
def test_bad_bounds_files_are_refused(tmp_path, text, says):
    path = tmp_path / "bounds.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=says):
        load_bounds_file(path, ("a", "b"))


def test_bounds_flag_parses():
    options, _ = parse_args(["serve", "--model", "x=data.csv", "--bounds", "x=b.csv"])
    assert {k: str(v) for k, v in options.knn.bounds.items()} == {"x": "b.csv"}
    with pytest.raises(SystemExit):
        parse_args(["serve", "--bounds", "nofile"])
