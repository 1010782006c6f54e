"""``petlab-synth plausible``: plausible-deniability synthesis of person records (VLDB 2017).

What reaches the terminal: the file written and the model's (DP) dependency order on success, one
line on failure, and in both cases the same privacy statement (:mod:`petlab.plaindata.plausible.
statement`): the per-record (k, gamma) criterion, Theorem 1's (eps, delta) for one released
record, the sentence that this is not a guarantee for the data set, and the model's own DP; a
function of the configuration only. No count of the input is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from petlab.errors import BadInput, reading_input
from petlab.plaindata import acs_sample_path
from petlab.plaindata.commands.common import DIAGNOSTICS_HELP, print_report, save_diagnostics
from petlab.plaindata.dp.noise import OpenDPNoise, SeededNoise
from petlab.plaindata.plausible.statement import report_lines
from petlab.plaindata.plausible.synthesis import (
    CANDIDATES_PER_RECORD,
    PlausibleConfig,
    candidate_limit,
    fit,
    synthesize,
)
from petlab.plaindata.plausible.tabular_schema import acs_discretization, acs_domains_path, load_domains
from petlab.plaindata.secure_random import release_generator

FAILED = (
    "petlab-synth: error: the run failed (fewer than --count records passed the privacy test within "
    "--max-candidates runs): nothing was released; raise --max-candidates or lower --count"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, help="input CSV (default: the shipped ACS 2013 sample)")
    parser.add_argument(
        "--domains", type=Path, help="public domains, one attribute a line (default: the ACS domains)"
    )
    parser.add_argument("--count", type=int, required=True, help="synthetic records to release")
    parser.add_argument("--out", type=Path, required=True, help="output CSV")
    parser.add_argument(
        "--k",
        type=int,
        default=50,
        help="plausible-deniability threshold: a record is released only if at least k seeds "
        "could have produced it",
    )
    parser.add_argument(
        "--gamma",
        type=float,
        default=4.0,
        help="plausible-deniability closeness: those seeds' probabilities are within a factor gamma",
    )
    parser.add_argument("--omega", type=int, default=9, help="attributes resampled from each seed")
    parser.add_argument("--eps0", type=float, default=1.0, help="Privacy Test 2's noise (Laplace 1/eps0)")
    parser.add_argument("--test", type=int, choices=[1, 2], default=2, help="Privacy Test 1 or 2")
    parser.add_argument(
        "--t", type=int, help="Theorem 1's t (default: smallest eps with delta <= model delta)"
    )
    parser.add_argument("--model-eps", type=float, default=1.0, help="DP budget of the generative model")
    parser.add_argument(
        "--model-delta", type=float, default=2.0**-30, help="DP delta of the generative model"
    )
    parser.add_argument("--max-cost", type=int, default=2000, help="cells per conditional table (eq. 6)")
    parser.add_argument(
        "--max-plausible",
        type=int,
        help="stop examining seeds at this many plausible ones (default: no limit)",
    )
    parser.add_argument(
        "--max-check-plausible", type=int, help="examine at most this many seeds per candidate (default: all)"
    )
    parser.add_argument(
        "--max-candidates",
        type=int,
        help=f"runs of Mechanism 1 allowed (default {CANDIDATES_PER_RECORD} x --count); fewer passing "
        "records than --count is a failed run",
    )
    parser.add_argument("--seed", type=int, help="seed for a reproducible run (NOT for release)")
    parser.add_argument("--diagnostics", type=Path, help=DIAGNOSTICS_HELP)


def run(args: argparse.Namespace) -> int:
    data_path = args.data or acs_sample_path()
    with reading_input():
        frame = pd.read_csv(data_path)
        schema = load_domains(args.domains or acs_domains_path())
        if args.domains is None and set(frame.columns) != set(schema.names):
            raise BadInput(
                f"{data_path} does not have the ACS attributes; give its public domains with --domains"
            )
        if args.count < 1:
            raise BadInput("--count must be at least 1")
        limit = candidate_limit(args.count, args.max_candidates)
        config = PlausibleConfig(
            k=args.k,
            gamma=args.gamma,
            omega=args.omega,
            eps0=args.eps0 if args.test == 2 else None,
            t=args.t,
            model_epsilon=args.model_eps,
            model_delta=args.model_delta,
            max_cost=args.max_cost,
            max_plausible=args.max_plausible,
            max_check_plausible=args.max_check_plausible,
        )
        codes = schema.encode(frame)
    seeded = args.seed is not None
    rng = release_generator(args.seed)  # ChaCha20 from os.urandom when unseeded
    noise = SeededNoise(args.seed) if seeded else OpenDPNoise()
    print(f"learning the model from {data_path} ...", file=sys.stderr)
    fitted = fit(codes, schema.cardinalities, acs_discretization(schema), config, rng, noise)
    result = synthesize(fitted, args.count, config, rng, noise, limit, show_progress=True)
    save_diagnostics(
        args.diagnostics,
        {
            "records": len(codes),
            "seeds": len(fitted.seeds),
            "candidates": result.candidates,
            "passed": result.passed,
            "pass_rate": result.pass_rate,
        },
    )
    statement = report_lines(fitted, config)
    if len(result.records) < args.count:
        print(FAILED, file=sys.stderr)
        print_report(statement, seeded)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    schema.decode(result.records)[list(frame.columns)].to_csv(args.out, index=False)
    order = " -> ".join(schema.names[i] for i in fitted.model.order)
    kept = ", ".join(schema.names[i] for i in fitted.model.kept(config.omega)) or "none"
    print(
        f"wrote {args.out}: {len(result.records)} records; dependency order {order}; "
        f"kept from the seed: {kept}"
    )
    print_report(statement, seeded)
    return 0
