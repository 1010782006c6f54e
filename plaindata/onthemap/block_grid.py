"""Public geography for domain shrinking: census blocks bucketed on a square grid.

Algorithm 2 of the ICDE 2008 paper (Section V-B) keeps each empty origin block i of destination d
with a public probability f_d(i), "roughly proportional to the histogram of commute distances"
(Section VI). We make f_d a step function of the grid distance between the destination's cell and
the origin's cell: blocks are projected to miles (equirectangular at the mean latitude), bucketed
in square cells of ``cell_miles``, and the *ring* of origin cell (r, c) around destination cell
(r0, c0) is the Chebyshev distance max(|r - r0|, |c - c0|). A distance band is a range of rings, so
it is the difference of two squares of cells, and:

* the number of blocks in a band is two look-ups in a 2-D prefix sum (O(1) per band), and
* a uniform block of a band is drawn by rejection from its outer square: blocks are stored sorted
  by (row, column), so the part of one grid row inside a square is one contiguous slice.

Nothing here looks at the confidential O/D data, so everything here is public (Theorem 5.2 needs
f_d to be data-independent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MILES_PER_DEGREE_LATITUDE = 69.0


@dataclass(frozen=True)
class BlockGrid:
    rows: int
    cols: int
    cell_of_block: np.ndarray  # int64 (row * cols + col) per block, in the caller's block order
    order: np.ndarray  # block indices sorted by cell
    cell_start: np.ndarray  # (rows * cols + 1,) start of each cell's slice of ``order``
    prefix: np.ndarray  # (rows + 1, cols + 1) 2-D prefix sum of blocks per cell

    @classmethod
    def build(cls, latitude: np.ndarray, longitude: np.ndarray, cell_miles: float = 1.0) -> BlockGrid:
        latitude, longitude = np.asarray(latitude, float), np.asarray(longitude, float)
        if latitude.shape != longitude.shape or latitude.ndim != 1 or len(latitude) == 0:
            raise ValueError("latitude and longitude must be equal-length, non-empty vectors")
        if not cell_miles > 0:
            raise ValueError("cell_miles must be positive")
        y = (latitude - latitude.min()) * MILES_PER_DEGREE_LATITUDE
        x = (longitude - longitude.min()) * MILES_PER_DEGREE_LATITUDE * np.cos(np.radians(latitude.mean()))
        row, col = (y // cell_miles).astype(np.int64), (x // cell_miles).astype(np.int64)
        rows, cols = int(row.max()) + 1, int(col.max()) + 1
        cell = row * cols + col
        order = np.argsort(cell, kind="stable")
        per_cell = np.bincount(cell, minlength=rows * cols)
        cell_start = np.zeros(rows * cols + 1, dtype=np.int64)
        np.cumsum(per_cell, out=cell_start[1:])
        prefix = np.zeros((rows + 1, cols + 1), dtype=np.int64)
        prefix[1:, 1:] = per_cell.reshape(rows, cols).cumsum(0).cumsum(1)
        return cls(rows, cols, cell, order, cell_start, prefix)

    @property
    def blocks(self) -> int:
        return len(self.cell_of_block)

    def ring(self, from_cells: np.ndarray, to_cells: np.ndarray) -> np.ndarray:
        """Chebyshev distance in cells between cell ids."""
        from_cells, to_cells = np.asarray(from_cells), np.asarray(to_cells)
        return np.maximum(
            np.abs(from_cells // self.cols - to_cells // self.cols),
            np.abs(from_cells % self.cols - to_cells % self.cols),
        )

    def _square(self, cells: np.ndarray, radius: np.ndarray):
        r, c = np.asarray(cells) // self.cols, np.asarray(cells) % self.cols
        r0, r1 = np.clip(r - radius, 0, self.rows), np.clip(r + radius + 1, 0, self.rows)
        c0, c1 = np.clip(c - radius, 0, self.cols), np.clip(c + radius + 1, 0, self.cols)
        return r0, r1, c0, c1

    def blocks_within(self, cells: np.ndarray, radius) -> np.ndarray:
        """Number of blocks in rings 0..radius - 1 around each cell (radius 0 gives 0)."""
        radius = np.asarray(radius, dtype=np.int64)
        r0, r1, c0, c1 = self._square(cells, radius - 1)
        p = self.prefix
        count = p[r1, c1] - p[r0, c1] - p[r1, c0] + p[r0, c0]
        return np.where(radius > 0, count, 0)

    def sample_rings(
        self, cells: np.ndarray, inner: np.ndarray, outer: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """One uniform block per request i among the blocks in rings inner[i]..outer[i] - 1 of
        cells[i], all requests at once: a uniform index into the outer square, located by a
        vectorised binary search over the square's cumulative row counts (2-D prefix sums), then
        rejection of the blocks inside the inner square."""
        cells, inner, outer = (
            np.asarray(v, dtype=np.int64) for v in np.broadcast_arrays(cells, inner, outer)
        )
        if (self.blocks_within(cells, outer) <= self.blocks_within(cells, inner)).any():
            raise ValueError("no block lies in the requested rings")
        out = np.full(len(cells), -1, dtype=np.int64)
        pending = np.arange(len(cells))
        p = self.prefix
        while len(pending):
            r0, r1, c0, c1 = self._square(cells[pending], outer[pending] - 1)

            def rows_before(r, r0=r0, c0=c0, c1=c1):  # blocks of the square in rows r0..r-1
                return p[r, c1] - p[r0, c1] - p[r, c0] + p[r0, c0]

            j = (rng.random(len(pending)) * rows_before(r1)).astype(np.int64)
            low, high = r0.copy(), r1.copy()  # find the row r with rows_before(r) <= j < rows_before(r + 1)
            while (high - low > 1).any():
                middle = (low + high) // 2
                below = rows_before(middle) <= j
                low, high = np.where(below, middle, low), np.where(below, high, middle)
            offset = j - rows_before(low)
            block = self.order[self.cell_start[low * self.cols + c0] + offset]
            ok = self.ring(self.cell_of_block[block], cells[pending]) >= inner[pending]
            out[pending[ok]] = block[ok]
            pending = pending[~ok]
        return out
