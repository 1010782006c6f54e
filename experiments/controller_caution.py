"""The controller's caution, measured: benign workloads run through the controller's decision, the
share it releases beside the share acro's rules alone would release, and every refusal with its
reason.

Workloads, each against its own history. "project": the analyses of
``client/examples/analyses.json``, then the shapes of ACRO's own example session (its ``acro_demo``
notebook on the nursery data: two-way crosstabs, crosstabs of a value's mean and sum, a pivot table
of means, one-way tables, OLS regressions, a binary outcome's linear model in place of its logit
and probit), put on the ACS sample's columns. Each analysis is its own one-analysis session of a
researcher, in the order listed, against one global history (as the server runs them; the decision
is ``ReleaseHistory.refusal``, with the public domain). "papers": ``PAPER_SHAPES``, written from two
published papers' tables (below).

acro's rules alone: ``output_checking.check`` with ``ACRO_PARITY`` on each analysis by itself (its
decisions equal acro 1.0.2's, ``tests/server/controller/test_output_checking.py``), with no history.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from collections import Counter
from importlib import resources
from pathlib import Path

import pandas as pd

from petlab.experiments import markdown
from petlab.plaindata import acs_sample_path
from petlab.server.controller.analyses import AnalysisError, evaluate
from petlab.server.controller.output_checking import ACRO_PARITY, check
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.release_history import ReleaseHistory


def _crosstab(rows: str, columns: str, **extra) -> dict:
    return {"type": "frequency", "rows": rows, "columns": columns, **extra}


def _magnitude(rows: str, columns: str | None, value: str, statistic: str, **extra) -> dict:
    spec = {"type": "magnitude", "rows": rows, "value": value, "statistic": statistic, **extra}
    if columns:
        spec["columns"] = columns
    return spec


def _ols(outcome: str, predictors: list[str], **extra) -> dict:
    return {"type": "regression", "outcome": outcome, "predictors": predictors, **extra}


ACRO_SHAPES: list[tuple[str, dict]] = [
    ("crosstab", _crosstab("sex", "incc")),
    ("crosstab", _crosstab("ms", "incc")),
    ("crosstab", _crosstab("race", "sex")),
    ("crosstab", _crosstab("wc", "sex")),
    ("crosstab", _crosstab("ms", "sex", where={"age": {"between": [25, 64]}})),
    ("crosstab mean", _magnitude("sex", "incc", "hpw", "mean")),
    ("crosstab mean", _magnitude("ms", "incc", "age", "mean")),
    ("crosstab sum", _magnitude("race", "sex", "hpw", "sum")),
    ("pivot table", _magnitude("ms", None, "age", "mean")),
    ("pivot table", _magnitude("wc", None, "hpw", "mean")),
    ("one-way table", {"type": "frequency", "rows": "rel"}),
    ("one-way table", {"type": "frequency", "rows": "waob"}),
    ("ols", _ols("hpw", ["age", "edu"])),
    ("ols", _ols("hpw", ["age", "edu", "sex"])),
    ("ols", _ols("hpw", ["age", "edu"], where={"incc": {"eq": 2}})),
    ("linear probability (logit/probit)", _ols("incc", ["age", "edu", "hpw"])),
    ("linear probability (logit/probit)", _ols("incc", ["age", "hpw", "sex"])),
    ("mean", {"type": "mean", "column": "hpw", "where": {"sex": {"eq": 1}}}),
    ("mean", {"type": "mean", "column": "hpw", "where": {"sex": {"eq": 2}}}),
    ("quantiles", {"type": "quantiles", "column": "age", "probabilities": [0.25, 0.5, 0.75]}),
]


def _counts(column: str, ranges: list[tuple[int, int]]) -> list[tuple[str, dict]]:
    return [("count", {"type": "count", "where": {column: {"between": [low, high]}}}) for low, high in ranges]


_DECILES = [0.1, 0.25, 0.5, 0.75, 0.9]
_QUARTILES = {"type": "quantiles", "probabilities": _DECILES}
# Written from two published papers' tables, on the ACS sample's columns (not from the controller's
# rules): Drechsler (PSD 2022, "Challenges in measuring utility for fully synthetic data", Section 3:
# Table 1's variables described one by one, educ in 4 categories; Figures 3 and 4's distributions of
# the continuous variables, overall and by group; Figure 5's regression of income on the other
# variables, here a linear probability model of the income class) and Bindschaedler, Shokri and
# Gunter (VLDB 2017, Tables 1 and 3: the income class predicted from the other attributes of ACS13,
# which an analyst first looks at attribute by attribute, and linear classifiers on a few of them).
PAPER_SHAPES: list[tuple[str, dict]] = [
    ("Drechsler Table 1: one-way table", {"type": "frequency", "rows": "sex"}),
    ("Drechsler Table 1: one-way table", {"type": "frequency", "rows": "race"}),
    ("Drechsler Table 1: one-way table", {"type": "frequency", "rows": "ms"}),
    *[
        (f"Drechsler Table 1: educ category {k + 1}", spec)
        for k, (_, spec) in enumerate(_counts("edu", [(1, 15), (16, 17), (18, 20), (21, 24)]))
    ],
    ("Drechsler Table 1: quantiles", {**_QUARTILES, "column": "age"}),
    ("Drechsler Table 1: mean", {"type": "mean", "column": "age"}),
    ("Drechsler Table 1: one-way table", {"type": "frequency", "rows": "incc"}),
    ("Drechsler Figures 3-4: quantiles", {**_QUARTILES, "column": "hpw"}),
    (
        "Drechsler Figures 3-4: quantiles by group",
        {**_QUARTILES, "column": "age", "where": {"sex": {"eq": 1}}},
    ),
    (
        "Drechsler Figures 3-4: quantiles by group",
        {**_QUARTILES, "column": "age", "where": {"sex": {"eq": 2}}},
    ),
    (
        "Drechsler Figures 3-4: quantiles by group",
        {**_QUARTILES, "column": "hpw", "where": {"incc": {"eq": 1}}},
    ),
    (
        "Drechsler Figures 3-4: quantiles by group",
        {**_QUARTILES, "column": "hpw", "where": {"incc": {"eq": 2}}},
    ),
    ("Drechsler Figure 5: regression", _ols("incc", ["sex", "race", "ms", "edu", "age"])),
    ("Drechsler Figure 5: regression", _ols("incc", ["sex", "race", "ms", "edu", "age", "hpw"])),
    ("Drechsler Figure 5: regression", _ols("hpw", ["sex", "race", "ms", "edu", "age"])),
    ("Drechsler Figure 5: regression by group", _ols("incc", ["edu", "age"], where={"sex": {"eq": 1}})),
    ("Drechsler Figure 5: regression by group", _ols("incc", ["edu", "age"], where={"sex": {"eq": 2}})),
    ("Bindschaedler Table 3: crosstab", _crosstab("sex", "incc")),
    ("Bindschaedler Table 3: crosstab", _crosstab("race", "incc")),
    ("Bindschaedler Table 3: crosstab", _crosstab("ms", "incc")),
    ("Bindschaedler Table 3: crosstab", _crosstab("wc", "incc")),
    ("Bindschaedler Table 3: crosstab", _crosstab("waob", "incc")),
    ("Bindschaedler Table 3: pivot table", _magnitude("ms", None, "incc", "mean")),
    ("Bindschaedler Table 3: crosstab mean", _magnitude("ms", "incc", "hpw", "mean")),
    ("Bindschaedler Table 3: pivot table", _magnitude("wc", None, "age", "mean")),
    ("Bindschaedler Table 3: crosstab mean", _magnitude("race", "sex", "incc", "mean")),
    (
        "Bindschaedler Table 3: mean",
        {"type": "mean", "column": "incc", "where": {"edu": {"between": [21, 24]}}},
    ),
    (
        "Bindschaedler Table 3: mean",
        {"type": "mean", "column": "incc", "where": {"edu": {"between": [1, 15]}}},
    ),
    ("Bindschaedler Table 3: mean", {"type": "mean", "column": "hpw", "where": {"incc": {"eq": 2}}}),
    ("Bindschaedler Table 3: count", {"type": "count", "where": {"incc": {"eq": 2}, "sex": {"eq": 2}}}),
    ("Bindschaedler Table 3: linear classifier", _ols("incc", ["age", "edu", "hpw", "sex"])),
    (
        "Bindschaedler Table 3: linear classifier",
        _ols("incc", ["age", "edu", "hpw", "sex", "ms", "race", "wc"]),
    ),
]


def paper_workload() -> list[tuple[str, dict]]:
    """The second benign workload: ``PAPER_SHAPES`` (written from two papers' tables)."""
    return list(PAPER_SHAPES)


def workload() -> list[tuple[str, dict]]:
    examples = json.loads(resources.files("petlab.client").joinpath("examples/analyses.json").read_text())
    out = [("client example: " + spec["type"], spec) for spec in examples["analyses"]]
    return out + [(f"acro example: {kind}", spec) for kind, spec in ACRO_SHAPES]


def workloads() -> dict[str, list[tuple[str, dict]]]:
    """The benign workloads, each run against its own history."""
    return {"project": workload(), "papers": paper_workload()}


def reason_kind(reason: str) -> str:
    """The kind of a refusal: its reason's leading words (``release_history``'s categories)."""
    if reason.startswith("query-set-size control: exact audit"):
        return "exact audit"
    return reason.split(":")[0]


def decisions(
    data: pd.DataFrame, domain: PublicDomain | None, specs: list[tuple[str, dict]] | None = None
) -> list[tuple[bool, str | None]]:
    """Each analysis's (acro alone releases it, the controller's refusal reason or None), in order
    against one history (default: the project's workload)."""
    history = ReleaseHistory(data, domain=domain)
    out: list[tuple[bool, str | None]] = []
    for _, spec in workload() if specs is None else specs:
        spec = {k: v for k, v in spec.items() if k != "label"}
        try:
            evaluated = evaluate(spec, data, domain)
        except AnalysisError as exc:
            out.append((False, f"cannot run: {exc}"))
            continue
        reason = history.refusal(evaluated)
        if reason is None:
            history.record(evaluated)
        out.append((check(evaluated, ACRO_PARITY).release, reason))
    return out


def measure(data: pd.DataFrame, domain: PublicDomain) -> tuple[list[dict], Counter]:
    """Every workload's rows (acro alone, the controller, the controller's reason when it refuses)
    and the controller's refusals by kind. The data is the shipped public sample: its reasons'
    figures may be printed (on confidential data they go to the confidential diagnostics only)."""
    rows: list[dict] = []
    kinds: Counter[str] = Counter()
    for name, specs in workloads().items():
        for (analysis, _), (acro, reason) in zip(specs, decisions(data, domain, specs), strict=True):
            if reason is not None:
                kinds[reason_kind(reason)] += 1
            rows.append(
                {
                    "workload": name,
                    "analysis": analysis,
                    "acro": "released" if acro else "refused",
                    "controller": "released" if reason is None else f"refused ({reason_kind(reason)})",
                    "reason": reason or "",
                }
            )
    return rows, kinds


def summary(rows: list[dict]) -> list[list]:
    """Per workload: analyses, released by acro's rules alone, by the controller, the share."""
    out = []
    for name in dict.fromkeys(row["workload"] for row in rows):
        mine = [row for row in rows if row["workload"] == name]
        acro = sum(row["acro"] == "released" for row in mine)
        ours = sum(row["controller"] == "released" for row in mine)
        out.append([name, len(mine), acro, ours, f"{ours / acro:.0%}" if acro else "-"])
    return out


def long_history_specs(data: pd.DataFrame) -> list[dict]:
    """One person's long history of means and small regressions over marital status x sex and age
    bands x sex (can one person's history slow everyone?): most records end in atoms of
    fewer than t records, so V (``release_audit``) is large."""
    specs: list[dict] = []
    for ms in sorted(int(v) for v in data.ms.unique()):
        for sex in (1, 2):
            where: dict[str, dict] = {"ms": {"eq": ms}, "sex": {"eq": sex}}
            specs += [
                {"type": "mean", "column": "hpw", "where": where},
                {"type": "mean", "column": "age", "where": where},
                _ols("hpw", ["age"], where=where),
            ]
    for band in ([16, 24], [25, 34], [35, 44], [45, 54], [55, 64], [65, 99]):
        for sex in (1, 2):
            where = {"age": {"between": band}, "sex": {"eq": sex}}  # a box of the public domain
            specs += [
                {"type": "mean", "column": "hpw", "where": where},
                {"type": "mean", "column": "edu", "where": where},
                _ols("hpw", ["edu"], where=where),
                _ols("hpw", ["age", "edu"], where=where),
            ]
            specs += [{"type": "mean", "column": "hpw", "where": {**where, "ms": {"eq": m}}} for m in (1, 5)]
    return specs


OTHER_COUNTS = [
    {"hpw": {"between": [0, 39]}},
    {"wc": {"eq": 1}},
    {"sex": {"eq": 1}},
    {"race": {"eq": 1}},
    {"incc": {"eq": 1}},
    {"ms": {"eq": 1}},
    {"age": {"between": [16, 34]}},
    {"edu": {"between": [0, 12]}},
]


def long_history(data: pd.DataFrame, domain: PublicDomain) -> list[list]:
    """After ``long_history_specs`` (each decided and released when allowed), another person's
    counts: (where, seconds to decide, the same count's seconds against an empty history in the
    same run, their ratio, search work units, decided by the split certificate, decision), and
    the load averages before and after. Timed on this machine: a measurement, not a test (the
    tests count work units)."""
    load_before = os.getloadavg()
    history = ReleaseHistory(data, domain=domain)
    for spec in long_history_specs(data):
        evaluated = evaluate(spec, data, domain)
        if history.refusal(evaluated) is None:
            history.record(evaluated)
    assert history.audit is not None
    out = [["(the history)", "", "", "", "", "", f"{history.n_released} rows released"]]
    for where in OTHER_COUNTS:
        evaluated = evaluate({"type": "count", "where": where}, data, domain)
        empty = ReleaseHistory(data, domain=domain)
        started = time.perf_counter()
        empty.refusal(evaluated)
        baseline = time.perf_counter() - started
        started = time.perf_counter()
        reason = history.refusal(evaluated)
        elapsed = time.perf_counter() - started
        decision = "released" if reason is None else f"refused ({reason_kind(reason)}: {reason[-60:]})"
        out.append(
            [
                json.dumps(where),
                f"{elapsed:.2f}",
                f"{baseline:.2f}",
                f"{elapsed / baseline:.1f}",
                f"{history.audit.search_work:.3g}",
                history.audit.certificate or "no",
                decision,
            ]
        )
    load_after = os.getloadavg()
    loads = [" / ".join(f"{x:.2f}" for x in load) for load in (load_before, load_after)]
    out.append(["(load averages, 1/5/15 min)", "", "", "", "", "", f"before {loads[0]}, after {loads[1]}"])
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--long-history",
        action="store_true",
        help="time another person's counts after one person's long history instead (prints only)",
    )
    parser.add_argument("--data", type=Path, default=None, help="CSV (default: the shipped ACS sample)")
    parser.add_argument(
        "--domain", type=Path, default=None, help="public domain CSV (default: the shipped ACS one)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/controller_caution.csv"),
        help="the CSV to write (a Markdown table beside it)",
    )


def run(args: argparse.Namespace) -> int:
    data = pd.read_csv(args.data or acs_sample_path())
    domain = PublicDomain.load(args.domain) if args.domain else PublicDomain.shipped_for(data)
    if domain is None:
        raise SystemExit("give --domain: the data does not have the shipped ACS columns")
    if args.long_history:
        columns = ["count", "seconds", "empty history", "ratio", "search work", "certificate", "decision"]
        print(markdown.table(columns, long_history(data, domain)))
        return 0
    rows, kinds = measure(data, domain)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "Benign workloads (petlab-experiments controller-caution), each against its own history.",
        "",
        markdown.table(
            [
                "workload",
                "analyses",
                "released by acro's rules alone",
                "by the controller",
                "share of acro's",
            ],
            summary(rows),
            align=["left", "right", "right", "right", "right"],
        ),
        "",
        markdown.table(
            ["refusal reason (controller)", "analyses"], sorted(kinds.items()), align=["left", "right"]
        ),
    ]
    print("\n".join(lines))
    refused = pd.DataFrame([row for row in rows if row["controller"] != "released"])
    lines += ["", "Every refusal and its reason (the shipped public sample):", ""]
    lines += [markdown.frame_table(refused[["workload", "analysis", "acro", "reason"]]), ""]
    lines += ["Every analysis:", "", markdown.frame_table(pd.DataFrame(rows).drop(columns="reason")), ""]
    path = args.out.with_suffix(".md")
    path.write_text("\n".join(lines))
    print(f"written to {args.out} and {path}")
    return 0
