"""The released forms' row space over the atoms, kept reduced modulo one prime.

The release audit (``release_audit``) needs, after each release, V: the combinations of released
forms that vanish on every large atom (t or more records), restricted to the small atoms. Here V
is read off a basis kept between checks, so a check never reads the released rows again (a
rebuild from the whole history is a left null space of the m released rows: an m x m matrix).

The basis. Rows B over the current atoms (columns), with pivot columns P such that B[:, P] = I
(reduced form), split in two kinds:

* B_1: rows whose pivot is a large atom;
* B_2: rows whose pivot is a small atom, and which are zero on every large atom.

Then the rows of B restricted to the large atoms are independent on them (B_1 has the identity on
its pivots there, B_2 is zero there), so a combination of B that vanishes on every large atom uses
B_2 only: V = span(B_2), exactly, over F_p. This is the row echelon form over the columns taken
large atoms first; B_2 is the block below the large columns' pivots.

A new row x is reduced once, x - x[P] B (one product, rank x atoms), and the remainders are brought
to reduced form with the large atoms' columns first, so a remainder whose pivot is small is zero on
every large atom (B_2) and one whose pivot is large joins B_1; the basis is then cleared on the new
pivots. Clearing a B_2 row with a new row whose pivot is large changes nothing (B_2 is zero there);
clearing B_1 with a new B_2 row leaves B_1's large part alone.

Atoms split. A release refines the atoms: an atom becomes pieces, and every form released before
weighs its pieces alike, so the basis over the new atoms is its columns duplicated (each piece gets
its atom's column). Duplicating a column keeps B[:, P] = I if one piece keeps the pivot (the others
are ordinary columns equal to it); the pivot goes to a large piece when there is one. A piece of a
small atom is small, so B_2 stays zero on the large atoms. A B_1 row whose atom's pieces are all
small has lost its large pivot: if it is zero on every large atom it is now a B_2 row; otherwise it
is taken out and inserted again as a new row (it is zero on every other pivot, so it only needs the
reduction among the rows taken out).

What is exact, what is probabilistic, the cost.
* Exact over F_p: V, its support and its reduced form (unique, so equal to what the batch audit's
  sampled basis gives when its sampling spans V). No sampling: the batch audit's support probes
  (missed atom with probability p^-3) and random combinations (2 p^-8) are gone.
* Probabilistic: only the reduction modulo a random prime instead of over Q (``modular``: the audit
  may miss a determined group with probability below ``miss_probability``, B / 1.05e9 per prime).
* Cost: memory rank x atoms residues per prime (rank <= atoms <= records; a repeated or dependent
  form adds no row). A check of k new forms: one gather of the basis over the refined atoms
  (rank x atoms), the reduction (k x rank x atoms) and a reduced form of the k remainders
  (k^2 x atoms), then the reduced form of B_2 on its support (d^2 x support, d = dim V). A restart
  replays the stored forms over the final atoms as a blocked elimination (``_extended_once``, blocks
  of ``CHUNK`` rows): rows x rank x (atoms - rank) for the reductions, rank^2 x atoms for clearing
  B on the new pivots, and k^2 x atoms per block for the remainders; a row in the span is dropped
  after its reduction, and once rank = atoms the rows cost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from petlab.server.controller.audit_clock import tick
from petlab.server.controller.modular import matmul, rref

CHUNK = 256  # new rows reduced at once


@dataclass(frozen=True)
class ReducedBasis:
    """B (rank x atoms residues), its pivot columns and the atoms' kind (module docstring)."""

    rows: np.ndarray
    pivots: np.ndarray
    large: np.ndarray  # one bool per atom: t or more records
    p: int

    @classmethod
    def empty(cls, large: np.ndarray, p: int) -> ReducedBasis:
        large = np.asarray(large, dtype=bool)
        return cls(np.zeros((0, len(large)), dtype=np.int64), np.zeros(0, dtype=np.int64), large, p)

    @property
    def rank(self) -> int:
        return len(self.rows)

    @property
    def entries(self) -> int:
        """Residues kept (8 bytes each)."""
        return int(self.rows.size)

    def vanishing_on_large(self) -> np.ndarray:
        """B_2: a basis of the combinations of released forms that are zero on every large atom."""
        return self.rows[~self.large[self.pivots]]

    def refined(self, old_of_new: np.ndarray, large: np.ndarray) -> ReducedBasis:
        """The basis over refined atoms: new atom j is a piece of old atom ``old_of_new[j]``;
        ``large`` is the new atoms' kind (module docstring, "Atoms split")."""
        large = np.asarray(large, dtype=bool)
        old_of_new = np.asarray(old_of_new, dtype=np.int64)
        n_old, n_new = len(self.large), len(old_of_new)
        if (
            n_old == n_new
            and np.array_equal(large, self.large)
            and np.array_equal(old_of_new, np.arange(n_new))
        ):
            return self
        if not self.rank:
            return ReducedBasis.empty(large, self.p)
        tick()
        rows = self.rows[:, old_of_new]
        piece = np.full(n_old, -1, dtype=np.int64)  # each old atom's pivot piece: a large one if any
        new = np.arange(n_new)
        piece[old_of_new[::-1]] = new[::-1]
        big = new[large]
        piece[old_of_new[big][::-1]] = big[::-1]
        pivots = piece[self.pivots]
        orphan = ~large[pivots] & rows[:, large].any(axis=1)
        if not orphan.any():
            return ReducedBasis(rows, pivots, large, self.p)
        kept = ReducedBasis(rows[~orphan], pivots[~orphan], large, self.p)
        return kept.extended(rows[orphan])

    def extended(self, new_rows: np.ndarray) -> ReducedBasis:
        """The basis of the span of B and ``new_rows`` (k x atoms residues), in the same form."""
        basis = self
        for start in range(0, len(new_rows), CHUNK):
            basis = basis._extended_once(np.asarray(new_rows[start : start + CHUNK], dtype=np.int64))
        return basis

    def _extended_once(self, new_rows: np.ndarray) -> ReducedBasis:
        """One block of the elimination: the block is reduced against B by one product, its
        remainders brought to reduced form among themselves, then B cleared on their pivots by one
        product. Both products touch only the columns that are not pivots of B: a remainder is zero
        on B's pivots (B[:, P] = I), so B's entries there do not change."""
        tick()
        if self.rank == len(self.large):  # B spans every vector over the atoms: nothing to add
            return self
        p = self.p
        rest = new_rows % p
        free = np.ones(len(self.large), dtype=bool)
        free[self.pivots] = False
        if self.rank:  # x - x[P] B on the free columns (x[P] is small for a released form)
            rest[:, free] = (rest[:, free] - matmul(rest[:, self.pivots], self.rows[:, free], p)) % p
            rest[:, self.pivots] = 0
        rest = rest[rest.any(axis=1)]  # a form in the span of B adds nothing
        if not len(rest):
            return self
        order = np.concatenate([np.flatnonzero(self.large & free), np.flatnonzero(~self.large & free)])
        reduced_ordered, local = rref(rest[:, order], p)
        if not len(reduced_ordered):
            return self
        reduced = np.zeros((len(reduced_ordered), len(self.large)), dtype=np.int64)
        reduced[:, order] = reduced_ordered
        new_pivots = order[local]
        rows = self.rows
        if self.rank:
            rows = rows.copy()
            rows[:, free] = (rows[:, free] - matmul(rows[:, new_pivots], reduced[:, free], p)) % p
        return ReducedBasis(
            np.vstack([rows, reduced]), np.concatenate([self.pivots, new_pivots]), self.large, p
        )
