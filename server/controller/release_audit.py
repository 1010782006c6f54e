"""The exact audit of everything the controller has released, to anyone (issue 22).

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
The audit pools the
weight vectors of all functionals, whatever column they weigh, into one matrix M (pooling only
adds combinations, so it can refuse more, never less), with the universe 1_all always in it (N is
public).

What is refused. A group G of records has its count, and each column's sum, determined by the
releases exactly when 1_G lies in the row space of M (Chin and Ozsoyoglu 1982 audit SUM queries
this way for single records; here the unit is a group). Refused: any release after which a group
of 1 to t - 1 records is determined (t = ``Rules.threshold``).

How, exactly and without a dense sets x records matrix:

1. Atoms: classes of records that every released functional weighs alike. Every vector of the
   row space is constant on atoms, so only unions of atoms can be determined, and only atoms of
   fewer than t records (small atoms) can be in a determined group of fewer than t records.
2. V = R(M) restricted to combinations zero on the large atoms: the space every determined small
   group's indicator lies in. Since issue 30 (point 3) it is read off a basis kept between checks
   (``reduced_basis``): per prime, the released rows over the atoms in reduced form with the
   large atoms' columns first, so V is spanned, exactly, by the rows whose pivot is a small atom.
   A check refines the kept basis to the new atoms (a split atom's column is duplicated; a row
   that loses its large pivot is reduced again) and reduces the new rows against it once;
   :meth:`ReleaseAudit.record` keeps the result. Released rows are never read again, so one check
   costs O(rank x atoms) per new row, the state is rank x atoms residues per prime (rank <= atoms
   <= records, whatever the number of rows), and a restart replays the rows into the basis.
3. ``small_groups.find_group``: an exact search (a certificate either way) for a 0/1 vector of V
   whose atoms total fewer than t records, on V's reduced form over its support (the atoms where
   some vector of V is nonzero).

:meth:`ReleaseAudit.check_batch` is the audit before point 3, kept as the reference the
incremental one is tested against (same decision on random histories): it rebuilds V from all
released rows, a left null space Y of M on the large atoms (an m x m matrix), three random
elements of V for its support (an atom missed with probability p^-3) and D random combinations
for its basis (incomplete with probability below 2 p^-8). Its reduced form on the support is the
same matrix, as a reduced form is unique, so both give the search the same input.

All arithmetic is modulo random primes (``modular``, which states the error bound: below
B / 1.05e9 per prime, B the sum of log2 of the released rows' norms; two primes by default, a
group is refused if it is determined modulo either). No floating-point cut-off decides anything.

What is guaranteed: no release makes the count or any column's sum of a group of 1 to t - 1
records a linear function of the released figures (up to the stated probability). What is not:
bounds and integrality (a sum of two hours-worked values that equals 198 pins both at the maximum
of 99; Kleinberg, Papadimitriou and Raghavan 2000 show that auditing under such constraints, even
Boolean ones, is coNP-hard); quantiles and other order statistics (covered by their own rules);
what refusals tell (``service``: each refusal is a bit, bounded per person).

When the audit cannot finish (the kept basis would exceed ``max_entries`` numbers, V's basis
``max_entries`` or ``max_work`` operations to search, or the search its node budget) it refuses: a
long history of fine-grained releases eventually stops releasing, which costs utility, never
privacy.

The search is incremental (:meth:`ReleaseAudit._decide`): once the kept V has been searched with no
small group found, a check searches only the blocks of the new V that the old one does not contain
(none when V keeps its dimension), at most ``search_work_cap`` units per prime; a check whose
changed blocks would cost more is refused before any search. So one check's search costs at most
the cap, however long the history: one person's fine-grained history slows nobody else's decision,
it makes later releases that would enlarge a large V refused instead (utility, never privacy).
These caps are the only place where the incremental and the batch audit can decide
differently (the batch one's V basis is sampled with a margin of 8 rows, so it reaches its cap a
little earlier). Cost per check of k new rows: refining the basis (rank x atoms), reducing the rows
(k x rank x atoms), V's reduced form (none when it already is one, else d^2 x support, d = dim V)
and the search (d^2 x support per node); state kept between checks: the released functionals as
packed bits (m N / 8 bytes, for the pairwise rule), each record's atom (N integers) and the bases.
``petlab-experiments audit-bench --incremental`` measures it beside the batch audit.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from petlab.errors import PetlabError
from petlab.server.controller.audit_clock import tick
from petlab.server.controller.modular import (
    left_null_space,
    matmul,
    miss_probability,
    random_prime,
    residues,
    row_log2_norm,
    rref,
    times_bits,
)
from petlab.server.controller.reduced_basis import ReducedBasis
from petlab.server.controller.small_groups import SearchBudget, blocks, find_group

SUPPORT_SAMPLES = 3
SPAN_MARGIN = 8
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

    ``primes`` and ``rng`` are drawn from the operating system's CSPRNG unless given (tests)."""

    data: pd.DataFrame
    threshold: int = 10
    primes: tuple[int, ...] = ()
    rng: np.random.Generator | None = None
    max_entries: int = 25_000_000  # numbers in the kept basis (rank x atoms), or the space on the small atoms
    max_work: float = 2e9  # D^2 x support, the cost of reducing that basis (tens of seconds)
    search_budget: int = 20_000
    # per prime, the most one check may search once V is certified (``small_groups``' unit, the
    # sum over search nodes of d^2 x support, and the nodes): about a second per prime on the
    # 5,000-record sample, loaded (1.35e8 units took 1.2 to 1.6 s over two primes)
    search_work_cap: float = 8e7
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
    # the kept V has been searched and holds no small group (``_decide``): a check then searches
    # only the blocks of the new V that the old one does not contain
    _certified: bool = field(init=False, default=True, repr=False)
    _cleared: tuple | None = field(init=False, default=None, repr=False)  # the forms a check passed
    search_work: float = field(init=False, default=0.0)  # the last check's search: nodes + sum d^2 w

    def __post_init__(self) -> None:
        n = len(self.data)
        if not self.primes:
            self.primes = tuple(random_prime() for _ in range(self.n_primes))
        if self.rng is None:
            self.rng = np.random.default_rng(secrets.randbits(128))
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
        records (or why the audit cannot tell), or None. Incremental: the kept bases are refined
        and extended by ``functionals`` only (``reduced_basis``); :meth:`record` reuses the result."""
        for functional in functionals:
            self._validate(functional)
        atoms = self._refined(functionals)
        sizes = np.bincount(atoms)
        self.search_work = 0.0
        if not (sizes < self.threshold).any():
            self._passed(functionals, atoms)
            return None
        try:
            bases = self._extended(functionals, atoms, capped=True)
        except BasisCapacity:
            return Finding(
                f"the audit cannot certify the release: the basis of the released forms would "
                f"exceed {self.max_entries} numbers"
            )
        self._pending = (_key(functionals), atoms, bases)
        old_of_new = self._atoms[_representatives(atoms)]
        for p in self.primes:
            finding = self._decide(bases[p], sizes, p, old_of_new if self._certified else None)
            if finding is not None:
                return finding
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
        them for :meth:`record`; raises :class:`BasisCapacity` past ``max_entries``."""
        pending = self._pending
        if pending is not None and pending[0] == _key(functionals) and np.array_equal(pending[1], atoms):
            bases = pending[2]
        else:
            bases = self._extended(functionals, atoms, capped=True)
            self._pending = (_key(functionals), atoms, bases)
        return {p: basis.rank for p, basis in bases.items()}

    def ranks(self) -> dict[int, int]:
        """Each prime's rank of everything released, over the atoms."""
        return {p: basis.rank for p, basis in self._bases.items()}

    def _decide(
        self, basis: ReducedBasis, sizes: np.ndarray, p: int, old_of_new: np.ndarray | None = None
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
        release changes, not of the whole history."""
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
        if len(vanishing) * len(support) > self.max_entries or (
            len(vanishing) ** 2 * len(support) > self.max_work
        ):
            return Finding(
                f"the audit cannot certify the release: the combinations that vanish on every "
                f"group of {self.threshold} or more records span {len(vanishing)} dimensions over "
                f"{len(support)} small atoms, beyond its memory or work cap"
            )
        reduced = _reduced(vanishing[:, support], p)
        if old is None or old_of_new is None:
            return self._search(reduced, sizes, support, p)
        kept = self._bases[p]
        contained = _in_span(old, kept.pivots[~kept.large[kept.pivots]], old_of_new, p)
        changed = []
        for rows, columns in blocks(reduced):
            full = np.zeros((len(rows), len(sizes)), dtype=np.int64)
            full[:, support[columns]] = rows
            if not contained(full):
                changed.append((rows, columns))
        if sum(float(len(rows)) ** 2 * len(columns) for rows, columns in changed) > self.search_work_cap:
            return Finding(
                f"the audit cannot certify the release: the blocks of combinations it changes span "
                f"{sum(len(rows) for rows, _ in changed)} dimensions, beyond the search's cap of "
                f"{self.search_work_cap:g} per check"
            )
        spent = self.search_work
        for rows, columns in changed:
            left = self.search_work_cap - (self.search_work - spent)
            finding = self._search(rows, sizes, support[columns], p, left)
            if finding is not None:
                return finding
        return None

    def _search(
        self, basis: np.ndarray, sizes: np.ndarray, support: np.ndarray, p: int, work: float | None = None
    ) -> Finding | None:
        """``small_groups.find_group`` on ``basis`` (V's reduced form on ``support``), at most
        ``work`` units of it (``max_work`` when None); past it the release is refused."""
        counter = [0, 0.0]
        try:
            found = find_group(
                basis,
                sizes[support],
                self.threshold,
                p,
                self.search_budget,
                self.max_work if work is None else work,
                counter,
            )
        except SearchBudget:
            return Finding(
                f"the audit cannot certify the release: the search for a determined group of fewer "
                f"than {self.threshold} records needed more than its budget of steps or work"
            )
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

    def _extended(self, functionals: list[Functional], atoms: np.ndarray, capped: bool = False) -> dict:
        """Each prime's basis over ``atoms`` (the refined atoms) with ``functionals`` added."""
        large = np.bincount(atoms) >= self.threshold
        representatives = np.empty(len(large), dtype=np.int64)
        representatives[atoms[::-1]] = np.arange(len(atoms))[::-1]  # each atom's first record
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
                    if capped and refined.entries > self.max_entries:
                        raise BasisCapacity
            if capped and refined.entries > self.max_entries:
                raise BasisCapacity
            out[p] = refined
        return out

    def check_batch(self, functionals: list[Functional]) -> Finding | None:
        """The audit as it was before the kept bases (issue 22): V rebuilt from the whole history,
        a left null space of the released rows on the large atoms (an m x m matrix) and sampled
        combinations. The reference the incremental :meth:`check` is tested against; not used by
        the server."""
        for functional in functionals:
            self._validate(functional)
        atoms = self._refined(functionals)
        sizes = np.bincount(atoms)
        representatives = np.empty(len(sizes), dtype=np.int64)
        representatives[atoms[::-1]] = np.arange(len(atoms))[::-1]  # each atom's first record
        small = np.flatnonzero(sizes < self.threshold)
        if not len(small):
            return None
        bits = self.released_bits()
        if functionals:
            bits = np.concatenate([bits, np.stack([f.members for f in functionals])])
        weights = self._weights + [f.weight for f in functionals]
        large = np.flatnonzero(sizes >= self.threshold)
        for p in self.primes:
            finding = self._check_modulo(p, bits, weights, sizes, representatives, small, large)
            if finding is not None:
                return finding
        return None

    def _check_modulo(self, p, bits, weights, sizes, representatives, small, large) -> Finding | None:
        assert self.rng is not None
        on_large = self._over_atoms(bits, weights, representatives[large], p)
        combinations = left_null_space(on_large, p)  # Y: zero on every large atom
        if not len(combinations):
            return None
        probes = matmul(self.rng.integers(0, p, size=(SUPPORT_SAMPLES, len(combinations))), combinations, p)
        values = self._times(probes, bits, weights, representatives[small], p)
        support = small[(values != 0).any(axis=0)]
        if not len(support):
            return None
        basis = np.zeros((0, len(support)), dtype=np.int64)
        depth, drawn = 32, 0
        while True:
            exact = depth >= len(combinations)
            rows = len(combinations) if exact else depth
            if rows * len(support) > self.max_entries or rows * rows * len(support) > self.max_work:
                return Finding(
                    f"the audit cannot certify the release: the combinations that vanish on every "
                    f"group of {self.threshold} or more records span more than {len(basis)} "
                    f"dimensions over {len(support)} small atoms, beyond its memory or work cap"
                )
            if exact:  # every combination: no sampling
                mixing = combinations
            else:  # depth uniform random combinations in all: the ones not drawn yet
                draw = self.rng.integers(0, p, size=(depth - drawn, len(combinations)))
                mixing, drawn = matmul(draw, combinations, p), depth
            fresh = self._times(mixing, bits, weights, representatives[support], p)
            basis, _ = rref(np.concatenate([basis, fresh]), p)
            if exact or len(basis) <= depth - SPAN_MARGIN:
                break
            depth *= 2
        return self._search(basis, sizes, support, p)

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

    def _times(self, coefficients, bits, weights, records, p) -> np.ndarray:
        """coefficients (k x rows) times M over the atoms represented by ``records``, mod p: the
        query sets by one exact product with their bits, the weighted rows by one exact product per
        weighing column (its rows' bits times the column's residues), in blocks of records."""
        by_weight: dict[str | None, list[int]] = {}
        for row, weight in enumerate(weights):
            by_weight.setdefault(weight, []).append(row)
        out = np.zeros((len(coefficients), len(records)), dtype=np.int64)
        for weight, rows in by_weight.items():
            chosen, part = bits[rows], coefficients[:, rows]
            for start in range(0, len(records), 8192):
                tick()
                block = records[start : start + 8192]
                gathered = self._gather(chosen, block)
                if weight is None:
                    product = times_bits(part, gathered, p)
                else:
                    product = matmul(part, gathered * self._weight_residues(weight, p)[block][None, :], p)
                out[:, start : start + 8192] = (out[:, start : start + 8192] + product) % p
        return out


_CHUNK = 1024  # functionals gathered over the atoms at once


class BasisCapacity(PetlabError):
    """The kept basis would exceed ``max_entries``: the audit cannot certify (the release is refused;
    caught inside the audit, never a call's answer)."""


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
