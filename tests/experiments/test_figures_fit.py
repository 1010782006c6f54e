"""The committed figures' text stays inside the image (no clipped title, label or legend), and the
benchmarks page's k-NN plots are drawn from the committed tables: checked on the figures as the
experiments draw them, from the tables in results/ (no experiment is run)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from petlab.experiments import knn_figures, onthemap_figures

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
PNG = b"\x89PNG\r\n\x1a\n"


def spill(figure: plt.Figure) -> list[float]:
    """How far (inches) the drawn artists reach beyond each edge (left, bottom, right, top);
    all zero when everything is inside the image."""
    figure.canvas.draw()
    drawn = figure.get_tightbbox(figure.canvas.get_renderer())
    width, height = figure.get_size_inches()
    return [max(0.0, -drawn.x0), max(0.0, -drawn.y0), max(0.0, drawn.x1 - width), max(0.0, drawn.y1 - height)]


def test_spill_sees_a_clipped_title():
    figure, axis = plt.subplots(figsize=(3, 2))
    axis.set_title("a title much too long for a figure three inches wide, so it is clipped")
    assert spill(figure)[2] > 0.5
    plt.close(figure)


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_onthemap_figures_fit(number):
    frame = pd.read_csv(RESULTS / "onthemap_figures" / "onthemap_figures_per_block.csv")
    figure = onthemap_figures.figure_of(frame, number)
    assert max(spill(figure)) < 0.02, spill(figure)
    assert figure.axes[0].get_title().startswith(f"Figure {number}: ")
    plt.close(figure)


def test_knn_figures_are_drawn_from_the_committed_tables_and_fit(tmp_path):
    written = knn_figures.draw(RESULTS, tmp_path)
    assert [p.name for p in written] == ["knn_pbs.png", "knn_latency_pbs.png"]
    assert all(p.read_bytes()[:8] == PNG for p in written)
    bench = pd.read_csv(RESULTS / "knn_bench.csv")
    figure = knn_figures.pbs_figure(bench)
    plotted = {line.get_label() for line in figure.axes[0].get_lines()}
    assert plotted == {
        f"{a}, {d}" for a, d in bench[["algorithm", "dataset"]].drop_duplicates().itertuples(index=False)
    }
    assert max(spill(figure)) < 0.02, spill(figure)
    plt.close(figure)
    rows = knn_figures.quiet_latencies(RESULTS)
    quiet = pd.read_csv(RESULTS / "knn_speed_quiet.csv")
    for row in quiet.itertuples():  # every configuration of the quiet run is a point
        assert ((rows.dataset == row.dataset) & (rows.pbs_count == row.pbs_count)).any()
    figure = knn_figures.latency_figure(rows, "2 cores")
    assert max(spill(figure)) < 0.02, spill(figure)
    plt.close(figure)


def test_the_committed_pngs_are_the_ones_drawn_now():
    """The k-NN plots the benchmarks page shows are committed (``petlab-experiments knn-figures``
    draws them), at the size the code draws them."""
    for name in ("knn_pbs.png", "knn_latency_pbs.png"):
        assert _png_size(RESULTS / name) == (770, 462), name


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == PNG, path
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
