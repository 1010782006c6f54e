"""What plausible-deniability synthesis guarantees, and why no figure for the whole release is
printed (issue 31, replacing issue 24's composed statement, which rested on a false step).

Bindschaedler, Shokri and Gunter (VLDB 2017). Neighbouring data sets: D' = D + {d'}, one record
added to (or removed from) the seeds D_T (Theorem 1's neighbours); the model is fixed (it is
learned on D_S and D_P). Public: the schema, k, gamma, omega, eps0, t, ``--count`` and ``--max-
candidates`` (L).

**1. What the paper proves.** Definition 1, equation (1): y is releasable with
(k, gamma)-plausible deniability if at least k - 1 other records of D could have generated it with
probabilities within a factor gamma of the seed's. Privacy Test 1 checks it deterministically;
Privacy Test 2 with the threshold k + Lap(1 / eps0). Theorem 1: Mechanism 1 with Test 2 satisfies,
for every *set Y of synthetic records* and every integer 1 <= t < k,
Pr{M(D') in Y} <= e^eps Pr{M(D) in Y} + delta (and with D, D' swapped), eps = eps0 +
ln(1 + gamma / t), delta = e^{-eps0 (k - t)}. Section 8 (Discussion): "the (eps, delta)-differential
privacy guarantee applies to a single (released) synthetic record". That is what is printed.

**2. The outcome "nothing" is not covered.** In this project's generative model Pr{y = M(d)} is
one common value q(y) for every seed d that agrees with y on the kept attributes, 0 for the others
(:mod:`.bayes_model`), so all of them are plausible seeds, and one run of Mechanism 1 on n seeds
picks the kept values kappa with probability c_kappa / n (c_kappa seeds carry them), passes with
pi(c_kappa) = P(Lap(1 / eps0) <= c_kappa - k), and resamples the rest from the model:

  P_D(a record with kept values kappa) = (c_kappa / n) pi(c_kappa),
  P_D(nothing) = 1 - sum_kappa (c_kappa / n) pi(c_kappa).

Take D = n copies of one record and D' = D + one record that shares no kept value (the issue's
counterexample). With n >= k, P_D(nothing) = 1 - pi(n) = e^{-eps0 (n - k)} / 2, and
P_D'(nothing) >= (1 - pi(1)) / (n + 1), pi(1) = e^{-eps0 (k - 1)} / 2. At the defaults (k = 50,
eps0 = 1, t = 29: eps = 1.129, delta = 7.6e-10) and n = 60 the hockey-stick divergence
P_D'(nothing) - e^eps P_D(nothing) is 0.0163, 2e7 times delta: Theorem 1 holds for sets of records,
and cannot be extended to "nothing" (``tests/plaindata/plausible/test_plausible_release_law.py`` computes it
exactly with the project's own seed probabilities and plausible-seed counts).

**3. No whole-release figure.** ``synthesize`` runs Mechanism 1 at most L times until ``count``
records pass, and otherwise fails (nothing written, exit status 1). What an observer sees is the
``count`` records or FAILED.

* With the failure visible: FAILED has probability P(Binomial(L, p_D) < count), p_D = 1 -
  P_D(nothing). For ``count`` = L = 1 it is P_D(nothing) itself (divergence 0.0163 above); for
  any L and count it moves with p_D, which one record changes by about 1 / (n + 1). Composing
  Theorem 1 over the L runs (printed before issue 31) assumed each run DP for "nothing" too,
  which 2. refutes, and the exact law breaks it when ``count`` = L. Composing over the released
  records (the paper's Discussion) ignores the failure and the waiting: broken the same way.
* Without a failure (draw until ``count`` records pass): the records are i.i.d. from the law
  conditioned on passing, Q_D(kappa) = c_kappa pi(c_kappa) / W_D, W_D = sum c_kappa pi(c_kappa).
  For D = {a} and D' = {a, b}, a and b differing on a kept attribute, Q_D(b's values) = 0 and
  Q_D'(b's values) = 1/2: delta >= 1/2 whatever eps. In general the extra delta is
  pi(1) / W_D, a figure of the data (a data set whose records all have few look-alikes makes it
  large and the run endless), so no data-independent (eps, delta) is useful, and a statement
  computed from W_D would itself be a release.
* A run that never outputs "nothing" (a fallback record drawn from the model when the test
  fails) moves probability about q / (n + 1) onto records D never outputs (q: the fallback's
  probability of kept values no seed of D carries), so the counterexample still applies.

So ``petlab-synth plausible`` prints what the paper proves (the per-record criterion and Theorem
1's (eps, delta) for one released record, given the model), says that it is **not a guarantee for
the data set** (the number of records, the failed exit and the set of records together are not
covered), and prints no composed figure. The model's own (eps, delta)-DP (structure on D_S,
parameters on D_P: Sections 3.3.1 and 3.4.1, composed in :mod:`petlab.plaindata.dp.composition`)
is printed as what it is, a statement about the model, which is not released by itself. It
composes in parallel: every record goes to D_S, D_P or D_T independently with the public shares
(pi_S, pi_P, pi_T); for D' = D + {r}, couple the assignments of D's records; r lands in subset s
w.p. pi_s and only that subset changes, so for every event E, P(model(D') in E) <= sum_s pi_s
(e^{eps_s} P(model(D) in E) + delta_s) <= e^{max eps_s} P(model(D) in E) + max delta_s (eps_T =
delta_T = 0: the model does not read D_T).
"""

from __future__ import annotations

from petlab.plaindata.dp.privacy_cost import PrivacyCost
from petlab.plaindata.plausible.privacy_tests import default_t, theorem1
from petlab.plaindata.plausible.synthesis import FittedModel, PlausibleConfig

NEIGHBOURS = "neighbours: one seed record added or removed, the model fixed"
NOT_FOR_THE_DATA_SET = (
    "NOT a guarantee for the data set: the number of records released, the failed exit and the "
    "released records taken together are not covered, and no sound composed figure exists "
    "(plaindata/plausible/statement.py)"
)


def criterion_line(config: PlausibleConfig) -> str:
    """Definition 1 as the privacy test enforces it on every released record."""
    test = (
        "Privacy Test 1: at least k plausible seeds"
        if config.eps0 is None
        else f"Privacy Test 2: at least k + Lap(1/{config.eps0:g}) plausible seeds"
    )
    return (
        f"each released record: ({config.k}, {config.gamma:g})-plausible deniability (Definition 1, {test})"
    )


def one_record_cost(config: PlausibleConfig) -> PrivacyCost | None:
    """Theorem 1 for one run of Mechanism 1 with Test 2, for sets of released records; None for
    Test 1 (deterministic: no DP) or k < 2 (no t)."""
    if config.eps0 is None or config.k < 2:
        return None
    t = config.t if config.t is not None else default_t(config.k, config.eps0, config.model_delta)
    bound = theorem1(config.k, config.gamma, config.eps0, t)
    return PrivacyCost(
        bound.epsilon,
        bound.delta,
        f"one released record, given the model, for sets of records ({NEIGHBOURS})",
        f"Theorem 1, k = {config.k}, gamma = {config.gamma:g}, eps0 = {config.eps0:g}, t = {t}",
    )


def report_lines(fitted: FittedModel, config: PlausibleConfig) -> list[str]:
    """What ``petlab-synth plausible`` prints, the same for a successful run and a failed one:
    a function of the configuration only."""
    out = [
        f"plausible deniability: k = {config.k}, gamma = {config.gamma:g}, omega = {config.omega}",
        criterion_line(config),
    ]
    record = one_record_cost(config)
    if record is None:
        out.append("Privacy Test 1 is deterministic: no differential privacy for a released record")
    else:
        out += record.lines()
    out.append(NOT_FOR_THE_DATA_SET)
    if fitted.model_budget is None:
        out.append("model: learned WITHOUT noise (no differential privacy for D_S and D_P)")
    else:
        model = fitted.model_budget
        out += model.named(
            "model alone (structure on D_S, parameters on D_P; neighbours: one record added or "
            "removed; the records it generates are not covered)"
        ).lines()
    return out
