"""Everything released on one data set, and the decision on the next analysis.

One history for all analysts: whatever one of them receives, all may know. The decision on an
analysis, in order (the first reason wins; reasons state exact figures and go to the log only;
:meth:`ReleaseHistory.verdicts` gives every rule's):

0. the public caps: the audits' memory, bounded from the definitions alone (the rank over the
   public domain's cells of everything released with this analysis, ``region_audit``, or without
   a domain the number of distinct definitions released, times N), refused past the caps before
   any figure of the records is computed. No other cost refuses: the exact audit runs to its end,
   its time bounded by the audit's clock (``audit_clock``), whose expiry is no refusal;
1. output checking (``output_checking``): the analysis alone;
2. empty cells shown by equal sets: a new query set whose records are exactly those of a set
   released before (or of another set of the same analysis) while its definition differs (the
   values each column admits, ``analyses.definition``) shows that the records admitted by one
   definition and not the other are none: a zero cell, refused as acro refuses empty table cells.
   count(occ = 5) equal to count(occ = 5 and sex = 2) says that everyone in occupation 5 is a
   woman. (Empty regions that only three or more sets reveal are left to step 5.)
3. trackers and swaps (``query_set_control``): a set that differs from one released before by
   1 to t - 1 records on one side and fewer than t on the other;
4. the exact audit of all released functionals (``release_audit``): no group of 1 to t - 1
   records may have its count or sums determined;
5. regions of the public domain (``region_audit``, with a ``PublicDomain``): no release may show
   a linear relation on regions that hold no record which the domain does not imply (three or
   more sets showing an empty region, equal counts over definitions that select different cells
   of the domain).

What a refusal tells (simulatable auditing, Kenthapadi, Mishra and Nissim, PODS 2005). A rule that
decides from public information only (the domain, the definitions, what was released) tells the
analyst nothing: it decides the same on every data set that agrees with the earlier answers. A
threshold on a figure the release itself would show cannot do that (acro's small-cell rule refuses
a cell of t - 1 records and releases one of t, and two neighbouring data sets may give exactly
those); but each rule here refuses, on one of two neighbouring data sets that agree on every
earlier answer, only where the refused release would have shown what the rule protects: a set of
fewer than t records, a determined group of 1 to t - 1 records, an empty region, a swap
(``tests/server/controller/test_simulatable_refusals.py``, against an exact-rational oracle). A
rule that refuses one-sided differences (9 records on one side, 1,798 on the other) or a cap on
the audit's work (how V is structured) fails that test: its refusal falls on one neighbour only,
where releasing shows no exact value, so the position of one refusal in a session can spell out a
record's value.
The public caps decide from public information only, so alike on both. Spec-only rules (a
minimum, a quantile probability the rules do not allow, a table whose public domain has more than
1,000 cells) are decided before the data is read (``analyses.check_spec``) and are no refusals:
nothing is counted against the person.

Released rows are deduplicated: a row equal to one released before (same records,
weight and definition) adds nothing to what is known, so repeating an analysis adds nothing to the
history, its storage or the audit's cost.

:func:`released_functionals` is what an analysis adds to the history when it is released; the
session store keeps those rows under the data file's digest and :meth:`ReleaseHistory.replay`
rebuilds the state at start: the atoms, the bits and the audit's kept bases (``reduced_basis``),
one reduction of every stored row over the final atoms, so a restart costs what the history's
rank costs (rows x rank x atoms), not a rebuild per row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from petlab.server.controller.analyses import Evaluated
from petlab.server.controller.output_checking import Rules, check
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.query_set_control import QuerySetControl
from petlab.server.controller.region_audit import AuditCapacity, RegionAudit, RegionForm
from petlab.server.controller.release_audit import Functional, ReleaseAudit


@dataclass(frozen=True)
class Released:
    """One released functional as the history stores it."""

    members: bytes  # packed bits over the records
    weight: str | None  # None: a query set; else the column weighing its members
    definition: str  # the query set's definition (canonical JSON)


def released_functionals(evaluated: Evaluated) -> list[Released]:
    """What releasing ``evaluated`` adds to the history (``analyses`` names it per statistic)."""
    out = [
        Released(np.packbits(mask).tobytes(), None, definition)
        for mask, definition in zip(evaluated.query_sets, evaluated.definitions, strict=True)
    ]
    for index, column in evaluated.weighted:
        out.append(Released(out[index].members, column, out[index].definition))
    return out


@dataclass
class ReleaseHistory:
    data: pd.DataFrame
    rules: Rules = field(default_factory=Rules)
    audit: ReleaseAudit | None = None
    domain: PublicDomain | None = None  # with it, the region audit (module docstring, step 5)
    regions: bool = True  # the region audit's switch (tests turn it off to show the attacks)
    _definitions: dict[bytes, set[str]] = field(init=False, default_factory=dict, repr=False)
    _seen: set[tuple[bytes, str | None, str]] = field(init=False, default_factory=set, repr=False)
    _seen_rows: set[tuple[bytes, str | None]] = field(init=False, default_factory=set, repr=False)
    region_audit: RegionAudit | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if self.audit is None:
            self.audit = ReleaseAudit(self.data, self.rules.threshold)
        if self.domain is not None:
            self.region_audit = RegionAudit(self.audit, self.domain)
        everyone = np.packbits(np.ones(len(self.data), dtype=bool)).tobytes()
        self._definitions[_digest(everyone)] = {"{}"}
        self._seen.add((_digest(everyone), None, "{}"))
        self._seen_rows.add((_digest(everyone), None))

    @property
    def n_released(self) -> int:
        assert self.audit is not None
        return self.audit.n_released

    def replay(self, rows: Iterable[Released]) -> None:
        """Rebuild the state from stored rows (no checks: they were released)."""
        self._add(self.fresh(list(rows)))

    def fresh(self, rows: list[Released]) -> list[Released]:
        """``rows`` without those released before or repeated among them (module docstring)."""
        out, batch = [], set()
        for row in rows:
            key = (_digest(row.members), row.weight, row.definition)
            if key not in self._seen and key not in batch:
                batch.add(key)
                out.append(row)
        return out

    def refusal(self, evaluated: Evaluated) -> str | None:
        """Why ``evaluated`` may not be released now (module docstring), or None: the first rule
        that refuses, in the module docstring's order (later rules are not run)."""
        for reason in self._rules(evaluated):
            if reason:
                return reason
        return None

    def verdicts(self, evaluated: Evaluated) -> dict[str, str | None]:
        """Every rule's decision on ``evaluated`` (its reason, or None), each run whatever the
        others decide: what the simulatability test compares between neighbouring data sets."""
        names = [
            "public caps",
            "output checking",
            "zero cell",
            "tracker or swap",
            "exact audit",
            "empty region",
        ]
        return dict(zip(names, self._rules(evaluated), strict=True))

    def _rules(self, evaluated: Evaluated) -> Iterator[str | None]:
        """Each rule's reason or None, in order, lazily (a caller may stop at the first reason)."""
        assert self.audit is not None
        rows = self.fresh(released_functionals(evaluated))
        capped = self._public_cap(rows)
        yield f"public cap: {capped}" if capped else None
        decision = check(evaluated, self.rules)
        yield None if decision.release else "output checking: " + "; ".join(decision.reasons)
        empty = self._empty_cell(rows)
        yield f"zero cell: {empty}" if empty else None
        control = QuerySetControl(len(self.data), self.rules.threshold, self.audit.released_bits())
        sets = [np.frombuffer(row.members, dtype=np.uint8) for row in rows if row.weight is None]
        violation = control.violation_packed(np.stack(sets)) if sets else None
        yield f"query-set-size control: {violation}" if violation else None
        functionals = [_functional(row) for row in self._new_rows(rows)]
        finding = self.audit.check(functionals)
        yield f"query-set-size control: exact audit: {finding.reason}" if finding else None
        if self.region_audit is None or not self.regions or not rows:
            yield None
            return
        atoms = self.audit._refined(functionals)  # rows seen before split no atom
        # the record side: the audit's bases with the new rows (its check's, when it built them)
        ranks = self.audit.ranks_with(functionals, atoms)
        region = self.region_audit.check([_region_form(row) for row in rows], atoms, ranks)
        yield f"empty region: {region}" if region else None

    def _public_cap(self, rows: list[Released]) -> str | None:
        """Why releasing ``rows`` would pass the audits' memory caps, decided from public figures
        only (module docstring, step 0), or None. The bound on the record basis's rank is the rank
        over the domain's cells with the rows (``RegionAudit.rank_with``: rank_rec <= rank_cell
        modulo each prime, as M_rec = M_cell P; the cell side is computed over a Gram matrix, whose
        rank equals rank_cell except with ``region_audit``'s stated probability), or without the
        region audit the distinct definitions and weights released with these (rank <= rows)."""
        assert self.audit is not None
        if self.region_audit is not None and self.regions:
            try:
                bound = self.region_audit.rank_with([_region_form(row) for row in rows])
            except AuditCapacity:
                return (
                    f"the released forms' rank over the domain's cells would pass the region "
                    f"audit's cap of {self.region_audit.max_entries} numbers"
                )
        else:
            bound = len(self._seen) + len(rows)
        if self.audit.entries_bound(bound) > self.audit.max_entries:
            return (
                f"the audit's basis could hold {self.audit.entries_bound(bound)} numbers (rank at "
                f"most {bound} over {self.audit.n_records} records), past its cap of "
                f"{self.audit.max_entries}"
            )
        return None

    def record(self, evaluated: Evaluated) -> list[Released]:
        """Add a released analysis; returns the rows to store (those not released before)."""
        rows = self.fresh(released_functionals(evaluated))
        self._add(rows)
        return rows

    def _new_rows(self, rows: list[Released]) -> list[Released]:
        """Rows whose records and weight no earlier row has (the record-level audit's unit)."""
        out, batch = [], set()
        for row in rows:
            key = (_digest(row.members), row.weight)
            if key not in self._seen_rows and key not in batch:
                batch.add(key)
                out.append(row)
        return out

    def _add(self, rows: list[Released]) -> None:
        assert self.audit is not None
        if not rows:
            return
        self.audit.record([_functional(row) for row in self._new_rows(rows)])
        if self.region_audit is not None:
            self.region_audit.record([_region_form(row) for row in rows], self.audit._atoms)
        for row in rows:
            digest = _digest(row.members)
            self._seen.add((digest, row.weight, row.definition))
            self._seen_rows.add((digest, row.weight))
            if row.weight is None and any(row.members):
                self._definitions.setdefault(digest, set()).add(row.definition)

    def _empty_cell(self, rows: list[Released]) -> str | None:
        batch: dict[bytes, set[str]] = {}
        for row in rows:
            if row.weight is not None or not any(row.members):
                continue
            key = _digest(row.members)
            earlier = self._definitions.get(key, set()) | batch.setdefault(key, set())
            if earlier - {row.definition}:
                return (
                    f"a query set defined by {row.definition} has exactly the records of one defined "
                    f"by {sorted(earlier - {row.definition})[0]}: the records one admits and the "
                    "other does not are none"
                )
            batch[key].add(row.definition)
        return None


def _digest(members: bytes) -> bytes:
    return hashlib.sha256(members).digest()


def _functional(row: Released) -> Functional:
    return Functional(np.frombuffer(row.members, dtype=np.uint8), row.weight)


def _region_form(row: Released) -> RegionForm:
    return RegionForm(np.frombuffer(row.members, dtype=np.uint8), row.weight, row.definition)
