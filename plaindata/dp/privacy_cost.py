"""The privacy cost of a release, as a value: the one type every synthesizer returns
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
from decimal import ROUND_CEILING, Decimal

DP = "DP"
PROBABILISTIC_DP = "probabilistic DP"
NOTIONS = (DP, PROBABILISTIC_DP)
EPSILON_DECIMALS = 4
DELTA_DIGITS = 3


def rounded_up(value: float, decimals: int | None = None, digits: int | None = None) -> str:
    """``value`` as text, rounded UP (never below the bound it prints): to ``decimals`` places, or
    to ``digits`` significant digits (fixed notation from 1e-4 up, else scientific, like ``g``).
    The value's shortest decimal form (``repr``, within half a unit in the float's last place) is
    rounded towards +infinity, so 1/11 prints 0.091 at 4 places, 2^-30 prints 9.32e-10 at 3
    digits and an input of 1e-5 prints 1e-05. Trailing zeros are dropped."""
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a printed bound is a finite number >= 0, got {value}")
    exact = Decimal(repr(float(value)))
    if exact == 0:
        return "0"
    if digits is None:
        places = EPSILON_DECIMALS if decimals is None else decimals
        text = f"{exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_CEILING):f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    up = exact.quantize(Decimal(1).scaleb(exact.adjusted() - digits + 1), rounding=ROUND_CEILING)
    up = up.normalize()  # 9.999 -> 1E+1: the exponent moves with the carry
    if -4 <= up.adjusted() < digits:
        return f"{up:f}"
    mantissa = f"{up.scaleb(-up.adjusted()):f}"
    return f"{mantissa}e{up.adjusted():+03d}"


def epsilon_text(epsilon: float) -> str:
    """An epsilon as every program prints it: 4 decimals, rounded up."""
    return rounded_up(epsilon, decimals=EPSILON_DECIMALS)


def delta_text(delta: float) -> str:
    """A delta (or any probability bound) as every program prints it: 3 significant digits, rounded up."""
    return rounded_up(delta, digits=DELTA_DIGITS)


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
        budget = f"{self.symbol} = {epsilon_text(self.epsilon)}"
        budget += f", delta = {delta_text(self.delta)}" if self.delta else ""
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
