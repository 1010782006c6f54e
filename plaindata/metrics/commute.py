"""Utility metrics for synthetic commute (origin-destination) data.

* Average commute distance per destination block, synthetic against true (ICDE 2008, Section VI,
  Figures 1-4).
* Root average IMSE (Abowd, Gehrke and Vilhuber 2009, Section 3): on a table coarsened to a
  public partition ("tracts"), the integrated squared error of each destination's distribution
  over origin parts, IMSE(d) = sum_o (q_syn(o | d) - q_true(o | d))^2, averaged over destinations
  with their true employment as weights, then square-rooted. The paper reads it as "one-half the
  average width of the one-standard-error confidence band" of an origin proportion. Reported
  overall and per employment-size class, as in its Figures 2-3.
* Multi-scale earthmover approximation (Indyk; "Synthetic Data via Differential Privacy",
  Section 5.1, Figure 5): the sum over all quadtree nodes down to a depth of the node's diameter
  times |count_A - count_B| on it.
* Commute-distance CDFs (ibid., Figures 6-7).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pandas as pd

from petlab.plaindata.onthemap.commute_data import haversine_miles


def commute_miles(origin, destination, latitude, longitude) -> np.ndarray:
    """Great-circle miles between block indices (``latitude``/``longitude`` per block)."""
    latitude, longitude = np.asarray(latitude), np.asarray(longitude)
    return haversine_miles(latitude[origin], longitude[origin], latitude[destination], longitude[destination])


def average_commute_by_destination(destination, origin, count, latitude, longitude) -> pd.Series:
    """Worker-weighted mean commute miles per destination block."""
    miles = commute_miles(origin, destination, latitude, longitude)
    frame = pd.DataFrame({"d": destination, "w": np.asarray(count, float), "wm": miles * np.asarray(count)})
    sums = frame.groupby("d")[["w", "wm"]].sum()
    return (sums.wm / sums.w).rename("average_miles")


def commute_cdf(miles, count, grid_miles) -> np.ndarray:
    """Share of workers commuting at most each of ``grid_miles``."""
    miles, count = np.asarray(miles, float), np.asarray(count, float)
    order = np.argsort(miles)
    cumulative = np.cumsum(count[order]) / count.sum()
    position = np.searchsorted(miles[order], np.asarray(grid_miles, float), side="right")
    return np.where(position > 0, cumulative[np.maximum(position - 1, 0)], 0.0)


def root_average_imse(
    true_table: tuple[np.ndarray, np.ndarray, np.ndarray],
    synthetic_table: tuple[np.ndarray, np.ndarray, np.ndarray],
    part_of_block: np.ndarray,
    size_classes: tuple[int, ...] = (1, 5, 25, 100),
) -> pd.DataFrame:
    """Root average IMSE overall and per class of destination-part employment (module docstring).

    Tables are (destination block, origin block, count); both ends are coarsened to parts.
    ``size_classes`` are the lower edges of the employment classes.
    """
    part_of_block = np.asarray(part_of_block)

    def shares(table) -> pd.Series:
        d, o, c = (np.asarray(v) for v in table)
        frame = pd.DataFrame({"d": part_of_block[d], "o": part_of_block[o], "c": c})
        cells = frame.groupby(["d", "o"]).c.sum()
        return cells / cells.groupby(level="d").transform("sum")

    truth, synthetic = shares(true_table), shares(synthetic_table)
    both = truth.index.union(synthetic.index)
    squared = (truth.reindex(both, fill_value=0) - synthetic.reindex(both, fill_value=0)) ** 2
    imse = squared.groupby(level=0).sum()
    d, _, c = (np.asarray(v) for v in true_table)
    employment = pd.Series(c, index=part_of_block[d]).groupby(level=0).sum()
    imse = imse.reindex(employment.index, fill_value=0.0)
    edges = [*size_classes, np.inf]
    rows = [{"class": "all", "destinations": len(imse), "root_average_imse": _root_mean(imse, employment)}]
    for low, high in pairwise(edges):
        members = (employment >= low) & (employment < high)
        if members.any():
            label = f"{low}-{int(high) - 1}" if np.isfinite(high) else f"{low}+"
            rows.append(
                {
                    "class": label,
                    "destinations": int(members.sum()),
                    "root_average_imse": _root_mean(imse[members], employment[members]),
                }
            )
    return pd.DataFrame(rows)


def _root_mean(values: pd.Series, weights: pd.Series) -> float:
    return float(np.sqrt(np.average(values, weights=weights)))


def to_unit_cube(points: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Scale coordinates into [0, 1]^d with public bounds (Section 5.1 normalises to the cube)."""
    points = np.asarray(points, float)
    span = np.where(np.asarray(high) > np.asarray(low), np.asarray(high) - np.asarray(low), 1.0)
    return np.clip((points - low) / span, 0.0, 1.0)


def earthmover_approximation(a: np.ndarray, b: np.ndarray, depth: int) -> np.ndarray:
    """Cumulative multi-scale earthmover approximation between point sets in [0, 1]^d for
    depths 0..depth (Figure 5's y axis against its x axis)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError("two point arrays with the same number of columns")
    dims = a.shape[1]
    if depth < 0 or dims * depth > 62:
        raise ValueError(f"depth must lie in 0..{62 // dims} for {dims}-D points (64-bit cell keys)")
    out = np.zeros(depth + 1)
    total = 0.0
    for level in range(depth + 1):
        side = 2**level
        keys_a = _cell_keys(a, side)
        keys_b = _cell_keys(b, side)
        cells, inverse = np.unique(np.concatenate([keys_a, keys_b]), return_inverse=True)
        inverse = inverse.ravel()
        difference = np.bincount(inverse[: len(keys_a)], minlength=len(cells)) - np.bincount(
            inverse[len(keys_a) :], minlength=len(cells)
        )
        total += np.sqrt(dims) / side * np.abs(difference).sum()
        out[level] = total
    return out


def _cell_keys(points: np.ndarray, side: int) -> np.ndarray:
    index = np.minimum((points * side).astype(np.int64), side - 1)
    keys = np.zeros(len(points), dtype=np.int64)
    for column in range(points.shape[1]):
        keys = keys * side + index[:, column]
    return keys
