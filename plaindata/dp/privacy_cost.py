"""The privacy cost of a release, as a value (issue 21): the one type every synthesizer returns
and every report prints.

In the spirit of dp_accounting's ``DpEvent``: a mechanism states its own cost as a
:class:`PrivacyCost` (epsilon, delta, the notion it holds under, the result that proves it and the
public parameters behind it); a cost made of others keeps them in ``parts`` and names the rule that
combined them in ``covered_by``. The rules themselves (sequential, parallel, repeated runs) live in
one module only, :mod:`petlab.plaindata.dp.composition`; nothing else adds epsilons. A CLI or an
experiment prints :meth:`PrivacyCost.lines` and does no privacy arithmetic.

Notions: ``DP`` is (epsilon, delta)-differential privacy; ``probabilistic DP`` is Machanavajjhala
et al.'s (epsilon, delta)-probabilistic differential privacy (ICDE 2008, Definition 6: the output
falls in the disclosure set with probability at most delta). The two do not compose with each
other, so the composition rules refuse to mix them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

DP = "DP"
PROBABILISTIC_DP = "probabilistic DP"
NOTIONS = (DP, PROBABILISTIC_DP)


@dataclass(frozen=True)
class PrivacyCost:
    epsilon: float
    delta: float = 0.0
    what: str = ""  # the mechanism, in a person's words
    covered_by: str = ""  # the theorem, derivation or composition rule that proves the bound
    notion: str = DP
    parts: tuple[PrivacyCost, ...] = ()  # what a composed cost was composed from
    details: tuple[str, ...] = ()  # public parameters behind the bound, one line each
    symbol: str = "epsilon"  # how the statement names its epsilon (OnTheMap's is eps' of Theorem 5.2)

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0 and math.isfinite(self.epsilon)) or not 0 <= self.delta <= 1:
            raise ValueError(f"a privacy cost needs finite epsilon >= 0 and 0 <= delta <= 1, got {self}")
        if self.notion not in NOTIONS:
            raise ValueError(f"unknown privacy notion {self.notion!r}; one of {NOTIONS}")

    @property
    def vacuous(self) -> bool:
        """delta = 1 holds for every mechanism: the statement says nothing."""
        return self.delta >= 1

    def named(self, what: str, covered_by: str | None = None) -> PrivacyCost:
        """The same cost under another name (and proof)."""
        return replace(self, what=what, covered_by=self.covered_by if covered_by is None else covered_by)

    def line(self) -> str:
        epsilon = f"{self.epsilon:.4f}".rstrip("0").rstrip(".")
        budget = f"{self.symbol} = {epsilon}" + (f", delta = {self.delta:.3g}" if self.delta else "")
        notion = "-DP" if self.notion == DP else f"-{self.notion}"
        proof = f" ({self.covered_by})" if self.covered_by else ""
        warning = " (delta = 1: says nothing)" if self.vacuous else ""
        return f"{self.what}: ({budget}){notion}{proof}{warning}"

    def lines(self, indent: str = "  ") -> list[str]:
        """This cost, its public parameters, then its parts, indented."""
        out = [self.line()]
        out += [f"{indent}{detail}" for detail in self.details]
        for part in self.parts:
            out += [f"{indent}{line}" for line in part.lines(indent)]
        return out
