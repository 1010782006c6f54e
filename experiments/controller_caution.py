"""The controller's caution, measured (issue 30): a benign workload run through the controller's
decision, the share it releases beside the share acro's rules alone would release, and every
refusal counted by the kind of its reason.

Workload: the analyses of ``client/examples/analyses.json``, then the shapes of ACRO's own example
session (its ``acro_demo`` notebook on the nursery data: two-way crosstabs, crosstabs of a value's
mean and sum, a pivot table of means, one-way tables, OLS regressions, a binary outcome's linear
model in place of its logit and probit), put on the ACS sample's columns. Each analysis is its own
one-analysis session of a researcher, in the order listed, against one global history (as the
server runs them; the decision is ``ReleaseHistory.refusal``, with the public domain).

acro's rules alone: ``output_checking.check`` with ``ACRO_PARITY`` on each analysis by itself (its
decisions equal acro 1.0.2's, ``tests/server/controller/test_output_checking.py``), with no history.
"""

from __future__ import annotations

import argparse
import csv
import json
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


def workload() -> list[tuple[str, dict]]:
    examples = json.loads(resources.files("petlab.client").joinpath("examples/analyses.json").read_text())
    out = [("client example: " + spec["type"], spec) for spec in examples["analyses"]]
    return out + [(f"acro example: {kind}", spec) for kind, spec in ACRO_SHAPES]


def reason_kind(reason: str) -> str:
    """The kind of a refusal: its reason's leading words (``release_history``'s categories)."""
    if reason.startswith("query-set-size control: exact audit"):
        return "exact audit"
    return reason.split(":")[0]


def decisions(data: pd.DataFrame, domain: PublicDomain | None) -> list[tuple[bool, str | None]]:
    """Each workload analysis's (acro alone releases it, the controller's refusal reason or None)."""
    history = ReleaseHistory(data, domain=domain)
    out: list[tuple[bool, str | None]] = []
    for _, spec in workload():
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
    """The workload's rows (acro alone, the controller, the controller before issue 30: definitions
    from the values present, no region audit) and the controller's refusals by kind."""
    rows: list[dict] = []
    kinds: Counter[str] = Counter()
    before = decisions(data, None)
    for (name, _), (acro, reason), (_, old) in zip(workload(), decisions(data, domain), before, strict=True):
        if reason is not None:
            kinds[reason_kind(reason)] += 1
        rows.append(
            {
                "analysis": name,
                "acro": "released" if acro else "refused",
                "controller": "released" if reason is None else f"refused ({reason_kind(reason)})",
                "before issue 30": "released" if old is None else f"refused ({reason_kind(old)})",
            }
        )
    return rows, kinds


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    rows, kinds = measure(data, domain)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    n = len(rows)
    acro = sum(row["acro"] == "released" for row in rows)
    ours = sum(row["controller"] == "released" for row in rows)
    old = sum(row["before issue 30"] == "released" for row in rows)
    lines = [
        f"Benign workload: {n} analyses (petlab-experiments controller-caution).",
        "",
        markdown.table(
            ["released by", "analyses", "share"],
            [
                ["acro's rules alone", acro, f"{acro / n:.0%}"],
                ["the controller", ours, f"{ours / n:.0%}"],
                ["the controller before issue 30", old, f"{old / n:.0%}"],
            ],
            align=["left", "right", "right"],
        ),
        "",
        markdown.table(
            ["refusal reason (controller)", "analyses"], sorted(kinds.items()), align=["left", "right"]
        ),
    ]
    print("\n".join(lines))
    lines += ["", markdown.frame_table(pd.DataFrame(rows)), ""]
    path = args.out.with_suffix(".md")
    path.write_text("\n".join(lines))
    print(f"written to {args.out} and {path}")
    return 0
