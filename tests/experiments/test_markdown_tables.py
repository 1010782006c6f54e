"""The experiments' one Markdown table writer (``experiments/markdown.py``): cells stay as their
caller formatted them, alignment is the caller's, every row has the header's columns."""

from __future__ import annotations

import pandas as pd

from petlab.experiments import markdown


def cells(table: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]


def test_cells_are_shown_as_formatted():
    """Strings that look like numbers are not parsed again (tabulate would write 007 as 7, 1e3 as
    1000 and 0.10 as 0.1), and None is shown, not dropped."""
    shown = ["007", "1e3", "0.10", "1,234", None]
    table = markdown.table(["a", "b", "c", "d", "e"], [shown])
    assert cells(table)[2] == ["007", "1e3", "0.10", "1,234", "None"]
    frame = pd.DataFrame({"x": ["007"], "y": [0.10]})
    assert cells(markdown.frame_table(frame))[2] == ["007", "0.1"]  # str(value) of a float


def test_alignment_and_shape():
    table = markdown.table(["name", "count"], [["a", 1], ["bb", 22]], align=["left", "right"])
    lines = table.splitlines()
    assert lines[1].startswith("|:") and lines[1].endswith(":|")  # left, then right
    assert lines[1].count("|") == 3
    assert cells(table)[0] == ["name", "count"] and [row[1] for row in cells(table)[2:]] == ["1", "22"]
    assert all(line.count("|") == 3 for line in lines)
