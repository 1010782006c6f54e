"""The privacy of plausible-deniability synthesis as it runs (issue 24), derived here.

The release (:func:`petlab.plaindata.plausible.synthesis.synthesize` and ``petlab-synth
plausible``): each record of D goes to D_S, D_P or D_T independently with probabilities
(pi_S, pi_P, pi_T); the structure is learned on D_S and the parameters on D_P with differential
privacy; then Mechanism 1 runs on the seeds D_T, at most L times (L = ``--max-candidates``, public),
stopping at the run where the ``count``-th record passes Privacy Test 2. It outputs those ``count``
records, or, if fewer pass within L runs, nothing and a failure exit status.

**1. The seeds: L runs, the exit status included.** Let Z_1..Z_L be L runs of Mechanism 1 on
(model, D_T), each a record or "nothing". The release is a function of (Z_1..Z_L): the first
``count`` records among them, or FAILED when fewer than ``count`` are records (runs after the
stopping time are never made; making and ignoring them gives the same law). Theorem 1 makes each
run (eps1, delta1)-DP with respect to D_T for every set of outcomes, "nothing" included
(``tests/test_plausible_mechanism_law.py`` checks it on the exact law of a toy model), given the
model. So the L runs compose (:func:`petlab.plaindata.dp.composition.repeated`: the better of
basic and advanced composition, slack delta' = the model's delta) and everything computed from
them is post-processing: the records, **whether the run failed** (the exit status), how many
candidates were tried and how many passed. The statement depends on L, k, gamma, eps0 and t only:
never on the data, so it is printed, the same for a failed run as for a successful one.

Composing over the released records only (the paper's Discussion, and this project before issue
24) does not cover what runs: the number of runs and the failure both depend on the pass
probability p_D, which a neighbour changes. On the toy model of the tests, one record asked for
with L = 8 runs breaks the per-record statement (eps1, delta1) by a factor 2 in delta
(``tests/test_plausible_release_law.py``).

**The alternative, not printed: the law conditioned on passing.** Given the model, runs are
i.i.d.: a run passes w.p. p_D = sum_y P_D(y), and a passed record has law Q_D(y) = P_D(y) / p_D.
From Theorem 1, P_D(Y) / p_D <= (e^eps1 P_D'(Y) + delta1) / p_D, so Q_D is
(eps1 + ln(p_D' / p_D), delta1 / p_D)-DP per record, with p_D' / p_D <= e^eps1 + delta1 / p_D.
Both terms depend on p_D, a figure of the data with no public lower bound (a data set whose
candidates all have few plausible seeds makes it as small as e^{-eps0 (k - 1)} / 2): a statement
computed from it is itself a release of the data, and the exit status (probability
P(Bin(L, p_D) < count)) would still need its own accounting. So we print 1.

The cost of 1 is a statement over L runs instead of ``count`` records. The default L is
:data:`~petlab.plaindata.plausible.synthesis.CANDIDATES_PER_RECORD` x ``count`` (it was 100 x):
at the pass rates measured on the ACS data (k = 50, omega 9: 85% at 100,000 records, 29% on the
shipped 5,000-record sample) a run then fails with negligible probability (P(Bin(4000, 0.29) <
1000) ~ 1e-9), and the statement is four times the per-record one rather than a hundred times.

**2. The three subsets: parallel composition.** For D' = D + {r}, couple the assignments of D's
records; r lands in subset s with probability pi_s, and then only subset s differs (by r).
Given the assignment a and s, the release is (eps_s, delta_s)-DP in r: the structure costs
(eps_S, delta_S), the parameters (eps_P, delta_P) (the other stages take unchanged inputs or the
DP output), the seeds (eps_L, delta_L) of 1, adaptively given the model. So for every event E

  P(R(D') in E) = sum_a P(a) sum_s pi_s P(R_{a,s}(D') in E)
               <= sum_a P(a) sum_s pi_s (e^{eps_s} P(R_a(D) in E) + delta_s)
               <= e^{max eps_s} P(R(D) in E) + max_s delta_s,

and the same with D and D' swapped: the release is (max_s eps_s, max_s delta_s)-DP. With a
fixed-size split this fails as stated: n = 12 records split 2/4/6 and n = 13 split 3/4/6, so
adding a record moves others from one subset to another, and the neighbouring releases differ in
up to three records.

Privacy Test 1 (deterministic) and the un-noised model give no DP guarantee; the report says so
and composes nothing.
"""

from __future__ import annotations

from petlab.plaindata.dp.accounting import PrivacyCost
from petlab.plaindata.dp.composition import parallel, repeated
from petlab.plaindata.plausible.privacy_tests import default_t, theorem1
from petlab.plaindata.plausible.synthesis import FittedModel, PlausibleConfig

WHAT_RUNS = "the records, the exit status (a failed run) and the run tallies are computed from them"


def seeds_cost(config: PlausibleConfig, count: int, limit: int) -> PrivacyCost | None:
    """Part 1 of the module docstring: L = ``limit`` runs of Mechanism 1 with Test 2; None for
    Test 1, which gives no DP guarantee."""
    if config.eps0 is None or config.k < 2:
        return None
    t = config.t if config.t is not None else default_t(config.k, config.eps0, config.model_delta)
    bound = theorem1(config.k, config.gamma, config.eps0, t)
    one_run = PrivacyCost(
        bound.epsilon,
        bound.delta,
        "one run of Mechanism 1 with Privacy Test 2 (a record or nothing)",
        f"Theorem 1, k = {config.k}, gamma = {config.gamma:g}, eps0 = {config.eps0:g}, t = {t}",
    )
    what = f"seeds D_T: at most {limit} runs of Mechanism 1 until {count} records are out; {WHAT_RUNS}"
    return repeated(one_run, limit, config.model_delta, what)


def release_cost(fitted: FittedModel, config: PlausibleConfig, count: int, limit: int) -> PrivacyCost | None:
    """The whole release (part 2 of the module docstring); None when some part has no DP."""
    seeds = seeds_cost(config, count, limit)
    structure, parameters = fitted.structure.budget, fitted.parameters_budget
    if seeds is None or structure is None or parameters is None:
        return None
    shares = "/".join(f"{share:g}" for share in config.split)
    return parallel([structure, parameters, seeds]).named(
        "plausible-deniability release",
        f"parallel composition: each record assigned to D_S/D_P/D_T independently w.p. {shares}",
    )


def report_lines(fitted: FittedModel, config: PlausibleConfig, count: int, limit: int) -> list[str]:
    """What ``petlab-synth plausible`` prints, for a successful run and a failed one alike."""
    out = [f"plausible deniability: k = {config.k}, gamma = {config.gamma:g}, omega = {config.omega}"]
    cost = release_cost(fitted, config, count, limit)
    if cost is not None:
        return [*out, *cost.lines()]
    if fitted.model_budget is None:
        out.append("model: learned WITHOUT noise (no differential privacy for D_S and D_P)")
    else:
        out += fitted.model_budget.lines()
    seeds = seeds_cost(config, count, limit)
    if seeds is None:
        out.append("test: Privacy Test 1 (deterministic): (k, gamma)-plausible deniability, no DP guarantee")
    else:
        out += seeds.lines()
    return out
