"""People, not keys: who is analysing, and what a person may still do.

Identity. A key is not a person: anyone can make a thousand keys. The controller keeps refusals,
cool-downs and quotas per *person*:

* keys on the allow-list belong to the person the data owner names there (``configuration``);
* a key outside it analyses under the certification authority's co-signature, which names the
  person (``crypto.chain.traces.CertificationScope.person_id``): the authority vouches that this key
  is that person's, as it vouches for the sequence;
* ``--open-analysis`` (local demos): every key is a person of its own (``key:<hex>``), so none of
  this holds against someone with several keys; docs/explanation/threat-models.md ("Who may
  analyse") says so.

Refusals are bits. A refused analysis tells the analyst that releasing it would have been
disclosive: a yes/no answer computed from the confidential data (Kenthapadi, Mishra and Nissim,
"Simulatable auditing", PODS 2005: denials leak information, and an attacker can chain them).
Seven one-analysis probes, each refused or not depending on whether one person's hours exceed a
threshold, binary-search those hours. The controller cannot make refusals say nothing (the sets are
defined by the confidential columns themselves), so it bounds how many a person gets:

* each refusal (an abort that depends on the data: disclosure control, an analysis that cannot run
  on these records, an internal failure; not a changed sequence, not a spec the public schema or
  the rules reject on the spec alone, ``analyses.check_spec``) is counted; after
  ``refusal_budget`` refusals the person is suspended until the data owner lifts it
  (``petlab-server persons lift PERSON``);
* after each refusal the person waits ``cooldown_seconds`` before the next analysis;
* at most ``analyses_per_day`` analyses per rolling 24 hours;
* these are checked when a session opens and again at every ``Next``; a person has one open
  session at a time (a new one closes the old), and an abort closes every open session of the
  person, so a session opened earlier does not keep running.

What that bounds: over n analyses with at most R refusals, the pattern of refusals takes at most
sum_{j <= R} C(n, j) <= (n + 1)^R values, so it tells at most R log2(n + 1) bits about the data
(about one bit per refusal, up to the log2 of where it happened); R = 3 and n = 1,000 give at most
30 bits per person before the owner looks at them. A coalition of P certified persons gets P times
that: the authority's identity proofing is what keeps P small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from petlab.crypto.chain.traces import MAX_PERSON_ID, check_person_id

__all__ = [
    "MAX_PERSON_ID",
    "Barrier",
    "PersonPolicy",
    "PersonState",
    "barrier",
    "check_person_id",
    "key_person",
]

DAY = 86_400.0


@dataclass(frozen=True)
class PersonPolicy:
    refusal_budget: int = 3
    cooldown_seconds: float = 3600.0
    analyses_per_day: int = 1000
    # new released rows (forms) one person may add to the shared history, per session and
    # per rolling 24 hours: the audit's cost, which every person waits on, grows with them
    rows_per_session: int = 2_000
    rows_per_day: int = 10_000

    def __post_init__(self) -> None:
        if self.refusal_budget < 1 or self.analyses_per_day < 1 or self.cooldown_seconds < 0:
            raise ValueError("the refusal budget and the daily quota are at least 1, the cool-down >= 0")
        if self.rows_per_session < 1 or self.rows_per_day < 1:
            raise ValueError("the caps on released rows are at least 1")

    def leaked_bits(self, analyses: int) -> float:
        """The module docstring's bound on what refusals tell about the data over ``analyses``."""
        return self.refusal_budget * math.log2(analyses + 1)


@dataclass(frozen=True)
class PersonState:
    person: str
    refusals: int = 0
    last_refusal: float | None = None
    suspended: bool = False
    analyses_last_day: int = 0


@dataclass(frozen=True)
class Barrier:
    """Why a person may not analyse now. ``kind``: suspended, cooldown or quota."""

    kind: str
    message: str


def barrier(state: PersonState, policy: PersonPolicy, now: float) -> Barrier | None:
    """What stops ``state``'s person from running an analysis at ``now``, or None. The messages are
    about the person's own record, never about the data."""
    if state.suspended:
        return Barrier(
            "suspended",
            f"person {state.person!r} is suspended after {state.refusals} withheld analyses; the data "
            "owner can lift it (petlab-server persons lift)",
        )
    if state.last_refusal is not None and now - state.last_refusal < policy.cooldown_seconds:
        return Barrier(
            "cooldown",
            "an analysis of yours was withheld recently; this controller runs none of yours until "
            f"{policy.cooldown_seconds:g} s after it",
        )
    if state.analyses_last_day >= policy.analyses_per_day:
        return Barrier(
            "quota",
            f"person {state.person!r} has run {policy.analyses_per_day} analyses in the last 24 hours",
        )
    return None


def key_person(raw_key: bytes) -> str:
    """The person of a key nobody vouches for (``--open-analysis``): the key itself."""
    return "key:" + raw_key.hex()
