"""The one writer of the experiments' Markdown tables: pandas' ``DataFrame.to_markdown`` (tabulate's
``pipe`` format), every cell shown as its caller formatted it (no number parsing, no reformatting)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd


def frame_table(frame: pd.DataFrame, align: Sequence[str] | None = None) -> str:
    """``frame`` as a Markdown table without its index; each cell is ``str(value)``. ``align``, one
    of ``"left"``, ``"right"``, ``"center"`` a column, defaults to left for every column."""
    return frame.astype(str).to_markdown(index=False, disable_numparse=True, colalign=align)


def table(header: Sequence[str], rows: Iterable[Sequence[object]], align: Sequence[str] | None = None) -> str:
    """A Markdown table of ``rows`` (one value a column, already formatted) under ``header``."""
    return frame_table(pd.DataFrame([list(row) for row in rows], columns=list(header), dtype=object), align)
