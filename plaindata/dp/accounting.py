"""Privacy costs stated by the mechanisms themselves, composed by whoever reports them.

In the spirit of dp_accounting's ``DpEvent``: a mechanism returns a :class:`PrivacyCost` naming
its (epsilon, delta), the notion it holds under and the result that proves it; a CLI or an
experiment composes those statements (:func:`sequential`) and prints their lines. No privacy
arithmetic lives in a CLI or an experiment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PrivacyCost:
    epsilon: float
    delta: float = 0.0
    what: str = ""  # the mechanism, in a person's words
    covered_by: str = ""  # the theorem or derivation that proves the bound

    def __post_init__(self) -> None:
        if not self.epsilon >= 0 or not 0 <= self.delta < 1:
            raise ValueError(f"a privacy cost needs epsilon >= 0 and 0 <= delta < 1, got {self}")

    def line(self) -> str:
        budget = f"epsilon = {self.epsilon:g}" + (f", delta = {self.delta:g}" if self.delta else "")
        proof = f" ({self.covered_by})" if self.covered_by else ""
        return f"{self.what}: {budget}{proof}"


def sequential(costs: Sequence[PrivacyCost], what: str = "total") -> PrivacyCost:
    """Basic sequential composition (Dwork and Roth, Theorem 3.16): epsilons and deltas add."""
    return PrivacyCost(
        sum(c.epsilon for c in costs),
        sum(c.delta for c in costs),
        what,
        "sequential composition of the above (Dwork and Roth, Theorem 3.16)",
    )


def report_lines(costs: Sequence[PrivacyCost]) -> list[str]:
    """One line per mechanism, then their sequential composition when there are several."""
    lines = [c.line() for c in costs]
    if len(costs) > 1:
        lines.append(sequential(costs).line())
    return lines
