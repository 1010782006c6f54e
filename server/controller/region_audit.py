"""Regions of the public domain that the releases show empty.

The record-level audit (``release_audit``) asks which groups of *records* the releases determine;
a region of the domain that holds no record is no group of records, so it never sees it. The
analyst reasons about definitions: three counts, Q plus a target (Q1), Q1 in income class 1 and
Q in class 2, satisfy c1 - c2 - c3 = 0 exactly when the region "the target's cells in class 2"
holds nobody, which tells the target's class; count(hpw in {40, 51}) = count(hpw = 40) tells that
nobody works 51 hours.

Forms. A released count over a definition B (a box of the public domain, ``public_domain``) is the
linear form 1_B over the cells of the domain; a released sum of y over B is y . 1_B (y's value in
each cell), a product weight x*y the same with x y. On the records, the same forms are the
released rows of ``release_audit`` (M_rec = M_cell P, P putting each record in its cell).

The rule. A combination y of released forms with y^T M_rec = 0 but y^T M_cell != 0 is a linear
relation on the counts (and sums) of regions that hold no record, shown by the answers (y^T
answers = 0) although the domain does not imply it. Such relations exist exactly when
rank(M_cell) > rank(M_rec); the audit keeps gap = rank(M_cell) - rank(M_rec) and refuses a release
that makes it grow. A region of the domain whose count the forms determine and which holds 0
records is such a relation (its indicator over the cells, zero over the records); one holding 1 to
t - 1 records is a determined group of records, refused by ``release_audit``. A region empty in
the domain itself (an impossible combination: ``hpw between [0, 40]`` and ``[1, 40]`` when 0 is
not in the domain) is no cell at all, so equal boxes are the same form and the gap does not move.

What is exact, what is bounded.
* Exact over F_p (p the audit's random primes): both ranks, incrementally, modulo each prime; a
  release is refused if the gap grows modulo any of them. The cell side never lists cells (the
  domain has about 5.4e11 of them on ACS): it keeps the Gram matrix of an independent set I of
  forms over the cells, whose entries factor over the columns (<1_B u, 1_B' u'> = prod over
  columns c of <u_c, u'_c> over c's domain values), and its inverse; a new form f is independent
  of I over Q iff its Schur complement s = <f, f> - g^T G_II^-1 g (g = G[I, f]) is nonzero.
  Modulo p the decision can err only when p divides a nonzero minor of the Gram matrix: with
  Hadamard's bound on its entries this has the form of ``modular``'s bound (log2 of the minor
  over 30 x 3.5e7), below 1e-6 per prime for 2,000 forms on ACS; an error on the record side only
  refuses more, one on the cell side could miss a relation, which is why both primes are used.
* The record side is the release audit's own basis of the released forms over the record atoms
  (``reduced_basis``, rank x atoms residues): ``ReleaseAudit.ranks_with`` gives its rank with the
  new forms, from the bases its check already built. One copy serves both audits.
* Bounded: memory rank_cell^2 + rank_cell x (sum of the column domains' sizes) residues per prime
  here, beside the release audit's rank_rec x atoms; a check costs k rank_cell^2 for k new forms
  (the record side's reduction is the release audit's check). Both are figures of the definitions
  only: :meth:`RegionAudit.rank_with` gives rank_cell with the new forms (rank_rec <= rank_cell,
  since M_rec = M_cell P), and ``release_history`` refuses, on that public figure, a release past
  ``max_entries`` here or past the release audit's memory cap, before either audit runs.

What a refusal of this rule reveals: that some relation among empty regions would have become
visible; the release would have shown the relation itself. In the three-count attack both
branches refuse (an empty region here, a determined group of one record in ``release_audit``),
so the refusal is the same whatever the target's value
(``tests/server/controller/test_controller_regions.py`` measures it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from petlab.errors import PetlabError
from petlab.server.controller.audit_clock import tick
from petlab.server.controller.modular import matmul, residues, rref
from petlab.server.controller.public_domain import PublicDomain, label
from petlab.server.controller.release_audit import Functional, ReleaseAudit, factors

MAX_ENTRIES = 25_000_000
CHUNK = 256  # forms reduced at once


class AuditCapacity(PetlabError):
    """The cell side would exceed its memory cap (a figure of the definitions only)."""


@dataclass
class RegionForm:
    """One released form as the region audit sees it."""

    members: np.ndarray  # packed bits over the records
    weight: str | None
    definition: str  # canonical JSON: per column, the labels of the admitted domain values


@dataclass
class _Side:
    """The cell side modulo one prime (the record side is the release audit's basis)."""

    vectors: dict[str, np.ndarray]  # each column's factor of the independent forms
    inverse: np.ndarray  # the inverse of their Gram matrix over the cells


class RegionAudit:
    """Rank over the domain's cells against rank over the records (module docstring). The rank
    over the records is the release audit's (``ReleaseAudit.ranks_with``): one basis serves both,
    so ``audit`` must be fresh (nothing released but the universe) and record every form first."""

    def __init__(self, audit: ReleaseAudit, domain: PublicDomain, max_entries: int = MAX_ENTRIES):
        if audit.n_released:
            raise ValueError("the region audit starts with a fresh release audit")
        self.audit, self.domain, self.max_entries = audit, domain, max_entries
        self.columns = [c for c in domain.values if c in audit.data.columns]
        self._labels = {c: [label(v) for v in domain.values[c]] for c in self.columns}
        self._numeric: dict[tuple[str, int], np.ndarray] = {}
        self._sides = {
            p: _Side(
                {c: np.zeros((0, domain.size(c)), dtype=np.int64) for c in self.columns},
                np.zeros((0, 0), dtype=np.int64),
            )
            for p in audit.primes
        }
        self._record_ranks = dict.fromkeys(audit.primes, 0)  # the record side's ranks so far
        self._pending: tuple | None = None
        self.gap = 0
        everyone = np.packbits(np.ones(audit.n_records, dtype=bool))
        self.record([RegionForm(everyone, None, "{}")], audit._atoms)

    # ---------------------------------------------------------------- decisions

    def check(
        self, forms: list[RegionForm], atoms: np.ndarray, record_ranks: dict[int, int] | None = None
    ) -> str | None:
        """Why releasing ``forms`` (``atoms``: the record atoms with them) would show a relation on
        regions holding no record, or None. ``record_ranks``: the release audit's ranks with the
        forms added (``ReleaseAudit.ranks_with``), computed here when not given."""
        try:
            extended = self._extended_cells(forms)
        except AuditCapacity:
            return (
                "the region audit cannot certify the release: its basis would exceed "
                f"{self.max_entries} numbers"
            )
        if record_ranks is None:
            record_ranks = self.audit.ranks_with([Functional(f.members, f.weight) for f in forms], atoms)
        for p, (_, cells) in extended.items():
            records = record_ranks[p] - self._record_ranks[p]
            if cells > records:
                return (
                    "a region of the public domain holding no record would be shown: the released "
                    "forms and these satisfy a linear relation on the records that the domain does "
                    f"not imply ({cells} new dimension(s) over the cells, {records} over the records)"
                )
        return None

    def record(self, forms: list[RegionForm], atoms: np.ndarray) -> None:
        """Add released forms (after :meth:`check`, or on replay), after the release audit has
        recorded them (its ranks are the record side's). ``atoms`` is kept for the signature's
        callers; the release audit holds the atoms."""
        del atoms
        pending = self._pending
        if pending is not None and pending[0] == _key(forms):
            extended = pending[1]
        else:
            extended = self._extend(forms, capped=False)
        self._pending = None
        ranks = self.audit.ranks()
        self.gap += max(cells - (ranks[p] - self._record_ranks[p]) for p, (_, cells) in extended.items())
        self._sides = {p: side for p, (side, _) in extended.items()}
        self._record_ranks = ranks

    def rank_with(self, forms: list[RegionForm]) -> int:
        """The rank over the domain's cells of everything released with ``forms`` added (the
        largest over the primes): a figure of the definitions only, so of public information.
        Raises :class:`AuditCapacity` past ``max_entries``. The extension is kept for
        :meth:`check` and :meth:`record` of the same forms."""
        return max(len(side.inverse) for side, _ in self._extended_cells(forms).values())

    def _extended_cells(self, forms: list[RegionForm]) -> dict[int, tuple[_Side, int]]:
        pending = self._pending
        if pending is not None and pending[0] == _key(forms):
            return pending[1]
        extended = self._extend(forms)
        self._pending = (_key(forms), extended)
        return extended

    def entries(self) -> int:
        """Residues kept, over all primes (the cell side; the record side is the release audit's)."""
        total = 0
        for side in self._sides.values():
            total += side.inverse.size + sum(v.size for v in side.vectors.values())
        return total

    # ---------------------------------------------------------------- the cell side

    def _extend(self, forms: list[RegionForm], capped: bool = True) -> dict[int, tuple[_Side, int]]:
        """Each prime's cell side with ``forms`` added, and the rank it gained."""
        out = {}
        for p, side in self._sides.items():
            vectors, inverse = dict(side.vectors), side.inverse
            cells = 0
            for start in range(0, len(forms), CHUNK):
                tick()
                factors_ = [self._over_cells(form, p) for form in forms[start : start + CHUNK]]
                stacked = {c: np.stack([f[c] for f in factors_]) for c in self.columns}
                vectors, inverse, grew = _schur(vectors, inverse, stacked, p)
                cells += grew
                if capped and inverse.size > self.max_entries:
                    raise AuditCapacity
            out[p] = (_Side(vectors, inverse), cells)
        return out

    def ranks(self) -> tuple[int, int]:
        """(rank over the records, rank over the cells) of everything released, modulo the first
        prime."""
        first = self.audit.primes[0]
        return self._record_ranks[first], len(self._sides[first].inverse)

    def _over_cells(self, form: RegionForm, p: int) -> dict[str, np.ndarray]:
        admitted = json.loads(form.definition)
        powers: dict[str, int] = {}
        if form.weight is not None:
            for column in factors(form.weight, self.audit.data.columns):
                powers[column] = powers.get(column, 0) + 1
        out = {}
        for column in self.columns:
            labels = self._labels[column]
            if column in admitted:
                chosen = set(admitted[column])
                vector = np.array([lab in chosen for lab in labels], dtype=np.int64)
            else:
                vector = np.ones(len(labels), dtype=np.int64)
            for _ in range(powers.get(column, 0)):
                vector = vector * self._values(column, p) % p
            out[column] = vector
        return out

    def _values(self, column: str, p: int) -> np.ndarray:
        if (column, p) not in self._numeric:
            values = np.asarray(self.domain.values[column], dtype=np.float64)
            self._numeric[column, p] = residues(values, p)[0]
        return self._numeric[column, p]


def _key(forms: list[RegionForm]) -> tuple:
    return tuple((f.members.tobytes(), f.weight, f.definition) for f in forms)


def _schur(vectors: dict[str, np.ndarray], inverse: np.ndarray, factor: dict[str, np.ndarray], p: int):
    """The forms with per-column factors ``factor`` (k x d_c each) against the independent forms
    in ``vectors`` (Gram matrix inverse ``inverse``), over the cells. Their Schur complement
    S = G_FF - G_FI G_II^-1 G_IF is the Gram matrix of their parts orthogonal to the span of I
    (over Q), so its rank is the number of new dimensions and an independent set J of its columns
    joins I; the inverse grows by the block formula with S_JJ^-1. Gram entries are products over
    the columns of per-column inner products (module docstring)."""
    k = next(iter(factor.values())).shape[0]
    r = len(inverse)
    g = np.ones((r, k), dtype=np.int64)
    own = np.ones((k, k), dtype=np.int64)
    for column, u in factor.items():
        if r:
            g = g * matmul(vectors[column], u.T, p) % p
        own = own * matmul(u, u.T, p) % p
    if r:
        h = matmul(inverse, g, p)
        schur = (own - matmul(g.T, h, p)) % p
    else:
        h, schur = np.zeros((0, k), dtype=np.int64), own
    _, chosen = rref(schur, p)
    if not len(chosen):
        return vectors, inverse, 0
    block = schur[np.ix_(chosen, chosen)]
    augmented, pivots = rref(np.concatenate([block, np.eye(len(chosen), dtype=np.int64)], axis=1), p)
    if len(pivots) < len(chosen) or pivots[-1] >= len(chosen):  # S_JJ singular mod p: one at a time
        total = 0
        for i in range(k):
            vectors, inverse, grew = _schur(vectors, inverse, {c: u[i : i + 1] for c, u in factor.items()}, p)
            total += grew
        return vectors, inverse, total
    t_inv = augmented[:, len(chosen) :]
    h_j = h[:, chosen]
    grown = np.zeros((r + len(chosen), r + len(chosen)), dtype=np.int64)
    if r:
        h_t = matmul(h_j, t_inv, p)
        grown[:r, :r] = (inverse + matmul(h_t, h_j.T, p)) % p
        grown[:r, r:] = (-h_t) % p
        grown[r:, :r] = (-h_t.T) % p
    grown[r:, r:] = t_inv
    vectors = {c: np.vstack([vectors[c], factor[c][chosen]]) for c in vectors}
    return vectors, grown, len(chosen)
