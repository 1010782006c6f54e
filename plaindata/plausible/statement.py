"""What a plausible-deniability release guarantees, for everything it writes.

Bindschaedler, Shokri and Gunter (VLDB 2017). The release (:func:`.synthesis.release`): a public
number L of independent runs; each abstains with the public probability rho, else runs
Mechanism 1 (a seed drawn uniformly from D_T, Privacy Test 2); every passing record is written,
in run order, and how many were written is part of the output. Public: the schema, k, gamma,
omega, eps0, t, L, rho, the split shares and the model's budget.

The statement, in four steps (the derivation: ``docs/explanation/proofs/plausible-deniability.md``):

1. one run, every outcome (:mod:`.run_bound`): (eps1, delta1 + delta_nothing)-DP over records and
   nothing, for one seed record of D_T added or removed, the model fixed;
2. the L runs: their optimal composition (:func:`petlab.plaindata.dp.composition.repeated`);
   what is written is a function of their outcomes;
3. the whole data set: each record goes to D_S, D_P or D_T independently, so the release is the
   parallel composition (:func:`petlab.plaindata.dp.composition.parallel`) of the structure, the
   parameters and step 2, for one input record added or removed;
4. plausible deniability: Privacy Test 1 guarantees Definition 1 for every written record (and no
   DP); Privacy Test 2 does not: a run writes a record with at most k - j plausible seeds with
   probability at most (1 - rho) e^{-eps0 j} / 2.

Not covered: with ``max_check_plausible`` (a subsampled count) no DP figure is printed; with the
model learned without noise only step 2's figure is; the diagnostics file (counts of the data).
"""

from __future__ import annotations

import math

from petlab.plaindata.dp.composition import parallel, repeated
from petlab.plaindata.dp.privacy_cost import PrivacyCost, delta_text
from petlab.plaindata.plausible.privacy_tests import default_t, theorem1
from petlab.plaindata.plausible.run_bound import least_abstention, nothing_delta
from petlab.plaindata.plausible.synthesis import FittedModel, PlausibleConfig

SEEDS = "neighbours: one seed record added or removed, the model fixed"
INPUT = "neighbours: one record of the input added or removed"


def theorem1_t(config: PlausibleConfig) -> int | None:
    """Theorem 1's t (given, or :func:`default_t`); None for Test 1 or k < 2."""
    if config.eps0 is None or config.k < 2:
        return None
    return config.t if config.t is not None else default_t(config.k, config.eps0, config.model_delta)


def abstention(config: PlausibleConfig) -> float:
    """rho: ``config.abstain``, else the least that makes "nothing" cost no delta (0 for Test 1,
    which has no DP to protect)."""
    if config.abstain is not None:
        return config.abstain
    t = theorem1_t(config)
    if t is None or config.eps0 is None:
        return 0.0
    return least_abstention(config.k, config.eps0, theorem1(config.k, config.gamma, config.eps0, t).epsilon)


def run_cost(config: PlausibleConfig) -> PrivacyCost | None:
    """One run, records and nothing (step 1); None where no figure covers it."""
    t = theorem1_t(config)
    if t is None or config.eps0 is None or config.max_check_plausible is not None:
        return None
    bound = theorem1(config.k, config.gamma, config.eps0, t)
    rho = abstention(config)
    nothing = nothing_delta(config.k, config.eps0, bound.epsilon, rho)
    return PrivacyCost(
        bound.epsilon,
        min(1.0, bound.delta + nothing),
        f"one run of Mechanism 1, every outcome (a record or nothing) ({SEEDS})",
        f"Theorem 1 for records, k = {config.k}, gamma = {config.gamma:g}, eps0 = {config.eps0:g}, "
        f"t = {t}; nothing: abstention {rho:g} adds delta {delta_text(nothing)} (run_bound.py)",
    )


def seeds_cost(config: PlausibleConfig, runs: int) -> PrivacyCost | None:
    """The L runs, everything they write, given the model (step 2)."""
    one = run_cost(config)
    if one is None:
        return None
    return repeated(one, runs, config.model_delta, f"the {runs} runs, everything written ({SEEDS})")


def release_cost(fitted: FittedModel, config: PlausibleConfig, runs: int) -> PrivacyCost | None:
    """The whole release for one record of the input (step 3); None where no figure covers it."""
    seeds = seeds_cost(config, runs)
    structure, parameters = fitted.structure.budget, fitted.parameters_budget
    if seeds is None or structure is None or parameters is None:
        return None
    return parallel(
        [structure, parameters, seeds],
        f"whole release: the model and the {runs} runs, everything written ({INPUT})",
    )


def deniability_line(config: PlausibleConfig) -> str:
    """Definition 1 as the test in use gives it (step 4)."""
    if config.eps0 is None:
        return (
            f"plausible deniability (Privacy Test 1, deterministic): every written record has at least "
            f"k = {config.k} plausible seeds: ({config.k}, {config.gamma:g})-plausible deniability "
            "(Definition 1)"
        )
    rho = abstention(config)
    below_k = (1 - rho) * math.exp(-config.eps0) / 2
    line = (
        f"plausible deniability (Privacy Test 2, threshold k + Lap(1/{config.eps0:g})): Definition 1 "
        f"is NOT guaranteed; a run writes a record with fewer than k = {config.k} plausible seeds "
        f"with probability at most {delta_text(below_k)}"
    )
    t = theorem1_t(config)
    if t is not None:
        few = (1 - rho) * math.exp(-config.eps0 * (config.k - t)) / 2
        line += f", with {t} or fewer at most {delta_text(few)}"
    return line + ", whatever the data"


def report_lines(fitted: FittedModel, config: PlausibleConfig, runs: int) -> list[str]:
    """What ``petlab-synth plausible`` prints: a function of the configuration and the model's
    budget only (the same whatever the number of records written)."""
    rho = abstention(config)
    out = [
        f"plausible deniability synthesis: k = {config.k}, gamma = {config.gamma:g}, "
        f"omega = {config.omega}; {runs} runs of Mechanism 1, each abstaining with probability "
        f"{rho:g} whatever the data; every passing record written, their number part of the output",
        deniability_line(config),
    ]
    whole = release_cost(fitted, config, runs)
    seeds = seeds_cost(config, runs)
    if whole is not None:
        return out + whole.lines()
    if seeds is not None:
        out += seeds.lines()
    elif config.eps0 is None:
        out.append("Privacy Test 1 is deterministic: no differential privacy for the seeds")
    elif config.k < 2:
        out.append("k = 1: Theorem 1 has no t, no differential-privacy figure covers the runs")
    else:
        out.append(
            "--max-check-plausible counts on a random subsample: no differential-privacy figure "
            "covers the runs"
        )
    if fitted.model_budget is None:
        out.append("model: learned WITHOUT noise: no differential privacy for D_S and D_P or the data set")
    else:
        out += fitted.model_budget.named(
            f"model alone (structure on D_S, parameters on D_P; {INPUT}; the records written are not covered)"
        ).lines()
    return out
