"""The exact audit of everything the controller has released, to anyone.

Threat model. Whatever one analyst receives, all may know: analysts collude, share keys, or are one
person with many keys. So every new analysis is audited against every release the controller has
made on this data set (one global history, ``session_store`` keeps it under the data file's
SHA-256), not against the requesting analyst's own.

What is released. Every statistic is a set of linear functionals of the records (``analyses``
names them beside each statistic): a count over S is 1_S . 1, a sum or mean is 1_S . y and is
audited as the weighted functional y . 1_S as well (with y's values taken as known: a sum of a
column with few values is a count of finer sets, and a set defined by y's value pins y on it), a
table cell is its subset, a regression releases X^T 1_S and X^T y (each level's subgroup of S for a
discrete predictor, the weighted set x . 1_S for a numeric one, y . Q for each of those sets Q).
The audit pools the weight vectors of all functionals, whatever column they weigh, into one matrix
M (pooling only adds combinations, so it can refuse more, never less), with the universe 1_all
always in it (N is public).

What is refused. A group G of records has its count, and each column's sum, determined by the
releases exactly when 1_G lies in the row space of M (Chin and Ozsoyoglu 1982 audit SUM queries
this way for single records; here the unit is a group). Refused: any release after which a group
of 1 to t - 1 records is determined (t = ``Rules.threshold``). That is the only refusal here: the
audit has no cost cap of its own. Its memory is bounded by a public cap that ``release_history``
applies before the audit runs (:meth:`ReleaseAudit.entries_bound`), and its time by the audit's
clock (``audit_clock``), whose expiry is no refusal (docs/explanation/controller-audit.md).

How, exactly and without a dense sets x records matrix:

1. Atoms: classes of records that every released functional weighs alike. Every vector of the
   row space is constant on atoms, so only unions of atoms can be determined, and only atoms of
   fewer than t records (small atoms) can be in a determined group of fewer than t records.
2. V = R(M) restricted to combinations zero on the large atoms: the space every determined small
   group's indicator lies in, read off a basis kept between checks (``reduced_basis``): per
   prime, the released rows over the atoms in reduced form with the large atoms' columns first,
   so V is spanned, exactly, by the rows whose pivot is a small atom. A check refines the kept
   basis to the new atoms (a split atom's column is duplicated; a row that loses its large pivot
   is reduced again) and reduces the new rows against it once; :meth:`ReleaseAudit.record` keeps
   the result. Released rows are never read again, so one check costs O(rank x atoms) per new
   row, the state is rank x atoms residues per prime (rank <= atoms <= records, whatever the
   number of rows), and a restart replays the rows into the basis.
3. Two certificates, when the history holds no determined small group: the split certificate
   (:meth:`ReleaseAudit._split_certified`: the new forms split the atoms finely enough) and the
   column certificate (:meth:`ReleaseAudit._columns_certified`: every combination of the new V
   that vanishes on one of t - 1 groups of its columns lies in the history's V). Either shows,
   exactly, that no new small group can arise, and nothing is searched (the proofs are in the
   methods' docstrings).
4. Otherwise ``small_groups.find_group``: an exact search (a certificate either way) for a 0/1
   vector of V whose atoms total fewer than t records, on V's reduced form over its support (the
   atoms where some vector of V is nonzero), in the blocks of V that the history's V does not
   contain (:meth:`ReleaseAudit._decide`).

All arithmetic is modulo random primes (``modular``, which states the error bound: below
B / 1.05e9 per prime, B the sum of log2 of the released rows' norms; two primes by default, a
group is refused if it is determined modulo either). No floating-point cut-off decides anything.

What is guaranteed: no release makes the count or any column's sum of a group of 1 to t - 1
records a linear function of the released figures (up to the stated probability). What is not:
bounds and integrality (a sum of two hours-worked values that equals 198 pins both at the maximum
of 99; Kleinberg, Papadimitriou and Raghavan 2000 show that auditing under such constraints, even
Boolean ones, is coNP-hard); quantiles and other order statistics (covered by their own rules);
what refusals tell (``service``: each refusal is a bit, bounded per person).

Cost per check of k new rows: refining the basis (rank x atoms), reducing the rows (k x rank x
atoms), the split certificate (k x atoms, and eliminations of at most atoms x k), the column
certificate when V grew (t - 1 left null spaces of d x support / (t - 1), d = dim V), and, only
when neither holds, V's reduced form (d^2 x support, d = dim V) and the search (d^2 x
support per node; the number of nodes is not bounded by a polynomial: finding a low-weight 0/1
vector of a subspace is the minimum-distance problem). State kept between checks: the released
functionals as packed bits (m N / 8 bytes, for the pairwise rule), each record's atom (N integers)
and the bases. ``petlab-experiments audit-bench --incremental`` measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from petlab.server.controller.audit_clock import tick
from petlab.server.controller.modular import (
    left_null_space,
    matmul,
    miss_probability,
    random_prime,
    residues,
    row_log2_norm,
    rref,
)
from petlab.server.controller.reduced_basis import ReducedBasis
from petlab.server.controller.small_groups import blocks, find_group

CERTIFY_FORMS = 64  # new forms the split certificate takes at once (eliminations of pieces x forms)
PRODUCT = "*"  # a weight "x*y" is the product of the columns x and y (a regression's X^T X, X^T y)


def factors(weight: str, columns) -> list[str]:
    """The columns whose product is ``weight``: the column of that name if there is one, else the
    names between ``PRODUCT`` signs."""
    if weight in columns:
        return [weight]
    parts = weight.split(PRODUCT)
    missing = [part for part in parts if part not in columns]
    if missing:
        raise ValueError(f"no column {missing[0]!r} to weigh a functional")
    return parts


@dataclass(frozen=True)
class Functional:
    """A released linear functional: weight 1 (or the value of ``weight``) on each member record."""

    members: np.ndarray  # packed bits over the records (np.packbits of a boolean mask)
    # a numeric column weighing the members, or a product of columns "x*y" (``PRODUCT``)
    weight: str | None = None

    @classmethod
    def of(cls, mask: np.ndarray, weight: str | None = None) -> Functional:
        return cls(np.packbits(np.asarray(mask, dtype=bool)), weight)


@dataclass(frozen=True)
class Finding:
    """Why a release may not happen (for the log only: it states figures from the data)."""

    reason: str
    group_size: int = 0  # records of the determined group, 0 when the audit was inconclusive


@dataclass
class ReleaseAudit:
    """The audit state of one history: released functionals (packed bits) and each record's atom.

    ``primes`` are drawn from the operating system's CSPRNG unless given (tests)."""

    data: pd.DataFrame
    threshold: int = 10
    primes: tuple[int, ...] = ()
    # residues the kept basis may hold per prime (rank x atoms): ``release_history`` refuses, from
    # public figures only, a release whose public bound (:meth:`entries_bound`) passes it
    max_entries: int = 25_000_000
    n_primes: int = 2
    _bits: np.ndarray = field(init=False, repr=False)
    _weights: list[str | None] = field(init=False, repr=False)
    _atoms: np.ndarray = field(init=False, repr=False)
    _log2_norms: float = field(init=False, default=0.0)
    _residues: dict[tuple[str, int], np.ndarray] = field(init=False, default_factory=dict, repr=False)
    _scales: dict[str, int] = field(init=False, default_factory=dict, repr=False)
    _codes: dict[str, np.ndarray] = field(init=False, default_factory=dict, repr=False)
    _denominators: dict[str, np.ndarray] = field(init=False, default_factory=dict, repr=False)
    _bases: dict[int, ReducedBasis] = field(init=False, default_factory=dict, repr=False)
    _pending: tuple | None = field(init=False, default=None, repr=False)
    # the kept V holds no small group (searched, or the split certificate held): a check then
    # needs only the certificate, or searches only the blocks of the new V that the old one does
    # not contain
    _certified: bool = field(init=False, default=True, repr=False)
    _cleared: tuple | None = field(init=False, default=None, repr=False)  # the forms a check passed
    search_work: float = field(init=False, default=0.0)  # the last check's search: nodes + sum d^2 w
    # how the last check was decided without a search: "splits" (:meth:`_split_certified`),
    # "columns" (:meth:`_columns_certified`, for every prime) or "" (searched, or nothing to search)
    certificate: str = field(init=False, default="")

    def __post_init__(self) -> None:
        n = len(self.data)
        if not self.primes:
            self.primes = tuple(random_prime() for _ in range(self.n_primes))
        self._bits = np.zeros((16, (n + 7) // 8), dtype=np.uint8)
        self._bits[0] = np.packbits(np.ones(n, dtype=bool))  # the universe: N is public
        self._weights = [None]
        self._atoms = np.zeros(n, dtype=np.int64)
        self._log2_norms = row_log2_norm(np.ones(1)) + 0.5 * np.log2(max(n, 1))
        large = np.array([n >= self.threshold]) if n else np.zeros(0, dtype=bool)
        for p in self.primes:
            self._bases[p] = ReducedBasis.empty(large, p).extended(np.ones((1, len(large)), dtype=np.int64))

    # ---------------------------------------------------------------- the history

    @property
    def n_records(self) -> int:
        return len(self.data)

    @property
    def n_released(self) -> int:
        """Released functionals, the universe not counted."""
        return len(self._weights) - 1

    @property
    def n_atoms(self) -> int:
        return int(self._atoms.max()) + 1 if len(self._atoms) else 0

    def miss_probability(self) -> float:
        """``modular``'s bound on missing a determined group, for the rows released so far."""
        return miss_probability(self._log2_norms, len(self.primes))

    def state_bytes(self) -> int:
        """Bytes the audit keeps between checks: the packed released functionals, the atoms and
        the reduced bases (8 bytes per residue)."""
        return len(self._weights) * self._bits.shape[1] + self._atoms.nbytes + 8 * self.basis_entries()

    def basis_entries(self) -> int:
        """Residues in the kept bases, over all primes (rank x atoms each)."""
        return sum(basis.entries for basis in self._bases.values())

    def rank(self) -> int:
        """The rank of everything released over the atoms (modulo the first prime)."""
        return self._bases[self.primes[0]].rank

    def entries_bound(self, rank_bound: int) -> int:
        """A bound, from public figures only, on the residues the kept basis holds per prime when
        the released forms' rank is at most ``rank_bound``: rank x atoms <= ``rank_bound`` x N
        (atoms are nonempty classes of records). V's reduced form is a part of that basis, so it is
        bounded too. ``release_history`` passes the rank over the public domain's cells (which
        bounds the rank over the records) or the number of distinct definitions released."""
        return min(rank_bound, self.n_records) * self.n_records

    def record(self, functionals: list[Functional]) -> None:
        """Add released functionals to the history (after :meth:`check` passed, or on replay)."""
        for functional in functionals:
            self._validate(functional)
        atoms = self._refined(functionals)
        pending, self._pending = self._pending, None
        cleared, self._cleared = self._cleared, None
        self._certified = (
            cleared is not None and cleared[0] == _key(functionals) and np.array_equal(cleared[1], atoms)
        )
        if pending is not None and pending[0] == _key(functionals) and np.array_equal(pending[1], atoms):
            self._bases = pending[2]
        else:
            self._bases = self._extended(functionals, atoms)
        self._atoms = atoms
        needed = len(self._weights) + len(functionals)
        if needed > len(self._bits):
            grown = np.zeros((max(needed, 2 * len(self._bits)), self._bits.shape[1]), dtype=np.uint8)
            grown[: len(self._weights)] = self._bits[: len(self._weights)]
            self._bits = grown
        for functional in functionals:
            self._bits[len(self._weights)] = functional.members
            self._weights.append(functional.weight)
            self._log2_norms += self._row_log2_norm(functional)

    def released_bits(self) -> np.ndarray:
        """The released functionals' packed members, universe first (a view, not a copy)."""
        return self._bits[: len(self._weights)]

    # ---------------------------------------------------------------- the check

    def check(self, functionals: list[Functional]) -> Finding | None:
        """Why releasing ``functionals`` after the history would determine a group of 1 to t - 1
        records, or None. Incremental: the kept bases are refined and extended by ``functionals``
        only (``reduced_basis``); :meth:`record` reuses the result. Exact whatever it costs: no
        cost cap refuses (module docstring)."""
        for functional in functionals:
            self._validate(functional)
        atoms = self._refined(functionals)
        sizes = np.bincount(atoms)
        self.search_work = 0.0
        self.certificate = ""
        if not (sizes < self.threshold).any():
            self._passed(functionals, atoms)
            return None
        bases = self._extended(functionals, atoms)
        self._pending = (_key(functionals), atoms, bases)
        if self._split_certified(functionals, atoms):
            self.certificate = "splits"
            self._passed(functionals, atoms)
            return None
        old_of_new = self._atoms[_representatives(atoms)]
        by_columns: list[int] = []
        for p in self.primes:
            finding = self._decide(bases[p], sizes, p, old_of_new if self._certified else None, by_columns)
            if finding is not None:
                return finding
        if len(by_columns) == len(self.primes):
            self.certificate = "columns"
        self._passed(functionals, atoms)
        return None

    def _passed(self, functionals: list[Functional], atoms: np.ndarray) -> None:
        """Note that ``functionals`` passed over ``atoms``: recorded next, the kept V is certified;
        with nothing new, it is certified now."""
        if functionals:
            self._cleared = (_key(functionals), atoms)
        elif np.array_equal(atoms, self._atoms):
            self._certified = True

    def ranks_with(self, functionals: list[Functional], atoms: np.ndarray) -> dict[int, int]:
        """Each prime's rank of the released forms with ``functionals`` added, over ``atoms`` (the
        refined atoms): the record-side rank the region audit (``region_audit``) compares with
        its rank over the cells. Reuses the bases :meth:`check` built for the same forms and keeps
        them for :meth:`record`."""
        pending = self._pending
        if pending is not None and pending[0] == _key(functionals) and np.array_equal(pending[1], atoms):
            bases = pending[2]
        else:
            bases = self._extended(functionals, atoms)
            self._pending = (_key(functionals), atoms, bases)
        return {p: basis.rank for p, basis in bases.items()}

    def ranks(self) -> dict[int, int]:
        """Each prime's rank of everything released, over the atoms."""
        return {p: basis.rank for p, basis in self._bases.items()}

    def _decide(
        self,
        basis: ReducedBasis,
        sizes: np.ndarray,
        p: int,
        old_of_new: np.ndarray | None = None,
        by_columns: list[int] | None = None,
    ) -> Finding | None:
        """The small-group search on V = B_2 (``reduced_basis``), in reduced form on its support.

        Incremental (``old_of_new``: each new atom's old atom, given when the kept V is certified,
        that is searched with no small group found). Atoms only split, so the old V, its columns
        copied to the pieces, lies in the new one (its vectors still vanish on every large atom,
        whose pieces are large or small, never the reverse), and each of its 0/1 vectors is one of
        the old ones with the same number of records. A minimal 0/1 vector of V lies in one block
        of V (rows that share no atom: ``small_groups.blocks``). So only the blocks of the new V
        that the old V does not contain can hold a new small group: the others are not searched.
        With no new dimension in V (a release that only splits atoms, or whose forms have a
        pivot on a large atom) nothing is searched; the search's cost is that of the blocks the
        release changes, not of the whole history, and not even that when the column certificate
        (:meth:`_columns_certified`) holds (``by_columns`` then gets p). It runs to its end: no cap
        refuses."""
        vanishing = basis.vanishing_on_large()
        if not len(vanishing):
            return None
        old = None
        if old_of_new is not None:
            old = self._bases[p].vanishing_on_large()
            if len(old) == len(vanishing):
                return None  # V is the old V over the refined atoms
        support = np.flatnonzero(vanishing.any(axis=0))
        if not len(support):
            return None
        if (
            old is not None
            and old_of_new is not None
            and self._columns_certified(basis, old[:, old_of_new], p)
        ):
            if by_columns is not None:
                by_columns.append(p)
            return None
        reduced = _reduced(vanishing[:, support], p)
        if old is None or old_of_new is None:
            return self._search(reduced, sizes, support, p)
        kept = self._bases[p]
        contained = _in_span(old, kept.pivots[~kept.large[kept.pivots]], old_of_new, p)
        for rows, columns in blocks(reduced):
            full = np.zeros((len(rows), len(sizes)), dtype=np.int64)
            full[:, support[columns]] = rows
            if not contained(full):
                finding = self._search(rows, sizes, support[columns], p)
                if finding is not None:
                    return finding
        return None

    def _search(self, basis: np.ndarray, sizes: np.ndarray, support: np.ndarray, p: int) -> Finding | None:
        """``small_groups.find_group`` on ``basis`` (V's reduced form, or a block of it, on
        ``support``), to its end; its work is added to :attr:`search_work`."""
        counter = [0, 0.0]
        try:
            found = find_group(basis, sizes[support], self.threshold, p, counter)
        finally:
            self.search_work += counter[0] + counter[1]
        if found is None:
            return None
        size = int(sizes[support][found].sum())
        return Finding(
            f"a group of {size} record(s) ({len(found)} atom(s)) would have its count and sums "
            f"determined: its indicator would be a linear combination of the released functionals",
            size,
        )

    def _columns_certified(self, basis: ReducedBasis, old: np.ndarray, p: int) -> bool:
        """True when the new V (``basis``'s B_2 rows) provably holds no 0/1 vector of 1 to t - 1
        records that the history's V (rows ``old``: its basis with each atom's column copied to its
        pieces, a subspace of the new V) does not hold, with no search. Exact modulo p.

        Proof. B_2 is the identity on its pivots P (``reduced_basis``), so every z of the new V is
        z = x B_2 with x = z[P], and the history's V is X_old B_2 with X_old = {y[P] : y in old}, a
        subspace of codimension a = dim new V - dim old V: the x orthogonal to the a rows of an
        annihilator A (A y[P] = 0 for every y in old). A 0/1 vector z of fewer than t records is
        nonzero on at most t - 1 atoms (each holds a record), at least one of them a pivot (x is
        not 0), so on at most t - 2 of the other columns of the support: it vanishes on one of
        t - 1 groups C_1 .. C_{t-1} of those columns (dealt out in turn), so x lies in
        L_k = {x : x B_2[:, C_k] = 0} (the search's pigeonhole, ``small_groups``). If every L_k
        lies in X_old (L_k A^T = 0), z lies in the history's V: it is one of the history's 0/1
        vectors (constant on the pieces of each earlier atom, the same records), and the history's
        V holds none of fewer than t records (certified). Cost: t - 1 left null spaces of
        dim V x (support / (t - 1)) residues, about what the search's first node costs, instead of
        the search."""
        t = self.threshold
        rows = basis.vanishing_on_large()
        pivots = basis.pivots[~basis.large[basis.pivots]]
        support = np.flatnonzero(rows.any(axis=0))
        is_pivot = np.zeros(rows.shape[1], dtype=bool)
        is_pivot[pivots] = True
        free = support[~is_pivot[support]]
        if t < 2 or len(free) < t - 1:
            return False
        annihilator = left_null_space(np.ascontiguousarray(old[:, pivots].T), p)  # A: (a x dim V)
        if len(annihilator) != len(rows) - len(old):
            return False  # the old rows are not independent over the pivots: not this shape
        for k in range(t - 1):
            tick()
            null = left_null_space(rows[:, free[k :: t - 1]], p)
            if len(null) and matmul(null, annihilator.T, p).any():
                return False
        return True

    def _split_certified(self, functionals: list[Functional], atoms: np.ndarray) -> bool:
        """True when releasing ``functionals`` provably determines no new group of 1 to t - 1
        records, with no search: the kept history holds none (it is certified) and the new forms
        split the atoms finely enough. Exact modulo each prime; False means only "not shown here"
        (the search decides).

        Proof. Let U be the row space of the released forms over the old atoms (each old form is
        constant on the pieces of an old atom), F = (f_1 .. f_k) the new forms, and G a group of
        1 to t - 1 records with 1_G in U + span(F): 1_G = u + g_c with u in U and g_c = sum c_j
        f_j. On an old atom a, u is constant, so 1_G is constant on a's pieces exactly when g_c
        is, that is when c lies in K_a = {c : sum_j c_j (f_j(piece) - f_j(first piece)) = 0 for
        every piece of a}. Where 1_G is not constant on a's pieces it holds at least one record of
        a (a piece is a nonempty atom), and old atoms are disjoint, so 1_G is not constant on at
        most t - 1 split atoms. Put the split atoms in t groups: 1_G is constant on every atom of
        some group i, so c lies in the intersection K(i) of K_a over that group. If K(i) = Z for
        every i, Z = {c : g_c in U} (checked here: Z' = the intersection over all split atoms is
        computed, and g_c for a basis of Z' is reduced against the kept basis over the old
        atoms), then g_c lies in U, so 1_G does: it is constant on pieces, G is a union of fewer
        than t records' old atoms, zero on every old large atom, so 1_G lay in the history's V,
        which holds no such vector (certified). So no such G exists. Cost: the new forms over the
        new atoms (k x atoms) and t + 1 eliminations of at most pieces x k residues per prime."""
        k = len(functionals)
        if not self._certified or not k or k > CERTIFY_FORMS:
            return False
        representatives = _representatives(atoms)
        old_of_new = self._atoms[representatives]
        first = np.full(self.n_atoms, -1, dtype=np.int64)  # each old atom's first piece
        first[old_of_new[::-1]] = np.arange(len(old_of_new))[::-1]
        pieces = np.bincount(old_of_new, minlength=self.n_atoms)
        others = np.flatnonzero(first[old_of_new] != np.arange(len(old_of_new)))  # pieces past the first
        split = np.flatnonzero(pieces > 1)
        group = np.searchsorted(split, old_of_new[others]) % self.threshold
        bits = np.stack([f.members for f in functionals])
        weights = [f.weight for f in functionals]
        for p in self.primes:
            values = self._over_atoms(bits, weights, representatives, p)  # k x new atoms
            differences = (values[:, others] - values[:, first[old_of_new[others]]]) % p
            everywhere = left_null_space(differences, p)  # Z': g_c constant on every old atom's pieces
            for i in range(self.threshold):
                tick()
                if len(left_null_space(differences[:, group == i], p)) != len(everywhere):
                    return False
            if len(everywhere):
                kept = self._bases[p]
                on_old = matmul(everywhere, values, p)[:, first]  # g_c over the old atoms
                if kept.rank:
                    free = np.ones(kept.rows.shape[1], dtype=bool)
                    free[kept.pivots] = False
                    rest = (on_old[:, free] - matmul(on_old[:, kept.pivots], kept.rows[:, free], p)) % p
                else:
                    rest = on_old
                if rest.any():  # some g_c in Z' is new on the old atoms
                    return False
        return True

    def _extended(self, functionals: list[Functional], atoms: np.ndarray) -> dict:
        """Each prime's basis over ``atoms`` (the refined atoms) with ``functionals`` added."""
        large = np.bincount(atoms) >= self.threshold
        representatives = _representatives(atoms)
        old_of_new = self._atoms[representatives]
        bits = np.stack([f.members for f in functionals]) if functionals else None
        weights = [f.weight for f in functionals]
        out = {}
        for p, basis in self._bases.items():
            refined = basis.refined(old_of_new, large)
            if bits is not None:
                for start in range(0, len(functionals), _CHUNK):
                    rows = self._over_atoms(
                        bits[start : start + _CHUNK], weights[start : start + _CHUNK], representatives, p
                    )
                    refined = refined.extended(rows)
            out[p] = refined
        return out

    # ---------------------------------------------------------------- helpers

    def _validate(self, functional: Functional) -> None:
        if functional.members.shape != (self._bits.shape[1],):
            raise ValueError("a functional's members must be packed bits over all records")
        if functional.weight is not None:
            factors(functional.weight, self.data.columns)

    def _refined(self, functionals: list[Functional]) -> np.ndarray:
        """Atoms after adding ``functionals``: records split by each functional's weight."""
        n = self.n_records
        key = self._atoms.copy()
        for functional in functionals:
            member = np.unpackbits(functional.members, count=n).astype(bool)
            code = member.astype(np.int64)
            if functional.weight is not None:  # members split by their factors' values (so by weight)
                code = np.where(member, self._value_codes(functional.weight), 0)
            span = int(code.max()) + 1
            if int(key.max()) >= (1 << 62) // max(span, 1):
                key = np.unique(key, return_inverse=True)[1].astype(np.int64)
            key = key * span + code
        return np.unique(key, return_inverse=True)[1].astype(np.int64)

    def _row_log2_norm(self, functional: Functional) -> float:
        member = np.unpackbits(functional.members, count=self.n_records).astype(bool)
        if functional.weight is None:
            return row_log2_norm(member.astype(np.float64))
        product, log2_denominator = np.ones(int(member.sum())), 0
        for column in factors(functional.weight, self.data.columns):
            product = product * self.data[column].to_numpy(dtype=np.float64)[member]
            if member.any():  # the members' common denominator: the largest one among them
                log2_denominator += int(self._denominator_bits(column)[member].max())
        return row_log2_norm(product) + log2_denominator

    def _value_codes(self, weight: str) -> np.ndarray:
        """Each record's combination of the weight's factor values, numbered 1, 2, ... in sorted
        order (kept per weight: a released sum splits its members by these codes)."""
        if weight not in self._codes:
            values = self.data[factors(weight, self.data.columns)].to_numpy(dtype=np.float64)
            self._codes[weight] = np.unique(values, axis=0, return_inverse=True)[1].ravel() + 1
        return self._codes[weight]

    def _denominator_bits(self, column: str) -> np.ndarray:
        """Each record's log2 of its dyadic value's denominator in ``column`` (``modular.residues``)."""
        if column not in self._denominators:
            distinct, inverse = np.unique(self.data[column].to_numpy(dtype=np.float64), return_inverse=True)
            bits = [residues(np.array([value]), self.primes[0])[1] for value in distinct]
            self._denominators[column] = np.asarray(bits, dtype=np.int64)[inverse.ravel()]
        return self._denominators[column]

    def _weight_residues(self, weight: str, p: int) -> np.ndarray:
        """Each record's weight mod p: the product of its factors' exact residues."""
        if (weight, p) not in self._residues:
            out = np.ones(self.n_records, dtype=np.int64)
            for column in factors(weight, self.data.columns):
                out = out * residues(self.data[column].to_numpy(dtype=np.float64), p)[0] % p
            self._residues[weight, p] = out
        return self._residues[weight, p]

    @staticmethod
    def _gather(bits: np.ndarray, records: np.ndarray) -> np.ndarray:
        """The 0/1 matrix of ``bits`` (rows x packed records) at ``records``."""
        return (bits[:, records >> 3] >> (7 - (records & 7)).astype(np.uint8)) & 1

    def _over_atoms(self, bits, weights, records, p) -> np.ndarray:
        """M over the atoms represented by ``records``, mod p (int64)."""
        matrix = self._gather(bits, records).astype(np.int64)
        for row, weight in enumerate(weights):
            if weight is not None:
                matrix[row] = matrix[row] * self._weight_residues(weight, p)[records] % p
        return matrix


_CHUNK = 1024  # functionals gathered over the atoms at once


def _reduced(rows: np.ndarray, p: int) -> np.ndarray:
    """``rows`` in reduced row echelon form mod p: sorted by their first nonzero column when that
    already is one (B_2 usually is: ``reduced_basis``), else by elimination. The form is unique, so
    either way the search gets what the batch audit gives it."""
    first = (rows != 0).argmax(axis=1)
    ordered = rows[np.argsort(first, kind="stable")]
    leads = np.sort(first)
    if len(ordered) and np.all(np.diff(leads) > 0) and np.array_equal(ordered[:, leads], np.eye(len(leads))):
        return ordered
    return rref(rows, p)[0]


def _representatives(atoms: np.ndarray) -> np.ndarray:
    """Each atom's first record."""
    out = np.empty(int(atoms.max()) + 1 if len(atoms) else 0, dtype=np.int64)
    out[atoms[::-1]] = np.arange(len(atoms))[::-1]
    return out


def _in_span(old: np.ndarray, pivots: np.ndarray, old_of_new: np.ndarray, p: int):
    """A test of whether rows over the new atoms lie in the span of ``old`` (rows over the old
    atoms, reduced: identity on their ``pivots``) with its columns copied to the pieces: x lies in
    it exactly when x - x[P] R = 0, R the copied rows and P one piece of each pivot (where R is
    still the identity)."""
    copied = old[:, old_of_new]
    piece = np.full(old.shape[1], -1, dtype=np.int64)
    piece[old_of_new[::-1]] = np.arange(len(old_of_new))[::-1]
    at = piece[pivots]

    def contained(rows: np.ndarray) -> bool:
        if not len(old):
            return not rows.any()
        return not ((rows - matmul(rows[:, at] % p, copied, p)) % p).any()

    return contained


def _key(functionals: list[Functional]) -> tuple:
    return tuple((f.members.tobytes(), f.weight) for f in functionals)
