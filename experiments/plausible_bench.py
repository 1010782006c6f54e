"""Plausible-deniability synthesis at scale: 100,000 candidates generated and tested
(k = 50, gamma = 4, omega = 9, Privacy Test 2 with eps0 = 1) from the 100,000-record ACS 2013 set;
target under 5 minutes on 2 cores.

Reported: model learning time, generation + test time, candidates and released records per
second, the pass rate, peak memory. The baseline, measured in the same run, is the per-candidate
definition (Pr{y = M(d)} for every seed as one vector, then the partition count of
:func:`~petlab.plaindata.plausible.privacy_tests.count_plausible_seeds`),
timed on a sample of candidates and scaled:
the ratio is what counting by kept-attribute keys buys. Both give the same counts (checked here on
the sample, and in ``tests/plaindata/plausible/test_plausible.py``). The paper's tool: over a million records
in under an hour on a multi-core machine (Section 6.5, Figure 5).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd

from petlab.errors import MissingFile
from petlab.experiments.report import EVALUATION_NOTICE
from petlab.plaindata import acs_sample_path
from petlab.plaindata.plausible.bayes_model import seed_probabilities
from petlab.plaindata.plausible.privacy_tests import count_plausible_seeds
from petlab.plaindata.plausible.statement import report_lines
from petlab.plaindata.plausible.synthesis import PlausibleConfig, fit, generate_and_test
from petlab.plaindata.plausible.tabular_schema import acs_discretization, acs_domains_path, load_domains

DATA_VARIABLE = "PETLAB_ACS_DATA"
SHARED_ACS = Path("..") / "shared" / "data" / "acs13.csv"  # relative to the working directory


def default_data() -> Path:
    """The ACS CSV to use when ``--data`` is not given, found the same way installed or not.

    ``$PETLAB_ACS_DATA`` when set (it must exist), else ``../shared/data/acs13.csv`` relative to the
    working directory when present, else the 5,000-record sample shipped in the package.
    """
    named = os.environ.get(DATA_VARIABLE)
    if named:
        return existing_data(Path(named), DATA_VARIABLE)
    return SHARED_ACS if SHARED_ACS.is_file() else acs_sample_path()


def existing_data(path: Path, source: str = "--data") -> Path:
    """``path`` itself, or :class:`~petlab.errors.MissingFile` naming the flag or variable that
    gave it and the way out."""
    if not path.is_file():
        raise MissingFile(
            path,
            f"{source} names the ACS 2013 CSV (e.g. ../shared/data/acs13.csv); leave it out to use "
            "the shipped 5,000-record sample",
        )
    return path


def run_bench(data: Path, candidates: int, config: PlausibleConfig, seed: int | None, out: Path) -> int:
    schema = load_domains(acs_domains_path())
    frame = pd.read_csv(data)
    codes = schema.encode(frame)
    rng = np.random.default_rng(seed)
    if candidates < 1:
        raise ValueError("candidates must be at least 1")
    print(EVALUATION_NOTICE, flush=True)
    print(f"{len(codes)} records from {data}; {candidates} candidates, k={config.k}, "
          f"gamma={config.gamma:g}, omega={config.omega}, eps0={config.eps0}", flush=True)  # fmt: skip
    start = time.perf_counter()
    fitted = fit(codes, schema.cardinalities, acs_discretization(schema), config, rng)
    learn_s = time.perf_counter() - start
    start = time.perf_counter()
    passed = 0
    for offset in range(0, candidates, 20_000):
        result = generate_and_test(fitted, min(20_000, candidates - offset), config, rng)
        passed += int(result.passed.sum())
    synth_s = time.perf_counter() - start

    baseline_s = _per_candidate_seconds(fitted, result, config) * candidates

    row = {
        "records": len(codes),
        "seeds": len(fitted.seeds),
        "candidates": candidates,
        "k": config.k,
        "gamma": config.gamma,
        "omega": config.omega,
        "eps0": config.eps0,
        "model_eps": config.model_epsilon,
        "learn_s": round(learn_s, 2),
        "generate_and_test_s": round(synth_s, 2),
        "candidates_per_s": round(candidates / synth_s),
        "released_per_s": round(passed / synth_s),
        "pass_rate": round(passed / candidates, 4),
        "baseline_per_candidate_s": round(baseline_s, 1),
        "speedup_vs_baseline": round(baseline_s / synth_s, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "cores": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    for key, value in row.items():
        print(f"  {key}: {value}")
    # what a release of this many runs states (a function of the configuration only)
    print("what a release with this configuration states:")
    print("\n".join(report_lines(fitted, config, candidates)))
    print(f"wrote {out}")
    return 0


def _per_candidate_seconds(fitted, result, config: PlausibleConfig) -> float:
    """The seconds per candidate of the per-candidate definition (the baseline), timed on up to
    300 of ``result``'s candidates; ``AssertionError`` if the keyed counts disagree with it."""
    sample = min(300, len(result.records))
    start = time.perf_counter()
    reference = [
        count_plausible_seeds(
            seed_probabilities(fitted.model, result.records[i], fitted.seeds, config.omega),
            int(result.seed_rows[i]),
            config.gamma,
        )
        for i in range(sample)
    ]
    seconds = (time.perf_counter() - start) / sample
    if reference != result.counts[:sample].tolist():
        raise AssertionError("the keyed counts disagree with the per-candidate definition")
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        help="ACS CSV (else ../shared/data/acs13.csv, else the shipped sample) [env PETLAB_ACS_DATA]",
    )
    parser.add_argument("--candidates", type=int, default=100_000, help="candidate records to synthesize")
    parser.add_argument("--k", type=int, default=50, help="plausible-deniability threshold k")
    parser.add_argument("--gamma", type=float, default=4.0, help="plausible-deniability closeness gamma")
    parser.add_argument("--omega", type=int, default=9, help="attributes resampled from each seed")
    parser.add_argument("--eps0", type=float, default=1.0, help="Privacy Test 2's noise (Laplace 1/eps0)")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument(
        "--out", type=Path, default=Path("results/plausible_bench.csv"), help="the CSV to write"
    )


def run(args: argparse.Namespace) -> int:
    data = existing_data(args.data) if args.data else default_data()
    synthesis = PlausibleConfig(k=args.k, gamma=args.gamma, omega=args.omega, eps0=args.eps0)
    return run_bench(data, args.candidates, synthesis, args.seed, args.out)
