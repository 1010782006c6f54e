"""The release audit's cost against the number of released sets: time and memory of one
decision at 5,000 and 100,000 records, with 10 to 2,000 sets already released.

Workload: random analyses of the kind ``client/examples/analyses.json`` holds, on the ACS columns:
counts and means under a ``where`` on one to three columns (``in`` lists of levels, ``between``
ranges of age and hours), and one- and two-way frequency and magnitude tables over the small-domain
columns. Their query sets are recorded as released until the history holds the target number of sets
(recording runs no check: it is what the server does at start when it replays its history, timed
here as ``replay_seconds``); then the next analysis that passes output checking is decided by the
controller's own decision (``ReleaseHistory.refusal``: output checking, empty cells, the pairwise
rule, the exact audit), timed, and its exact audit alone is timed again (the pairwise rule refuses
most random analyses first, so the decision alone would rarely reach the audit). Memory: the audit's
state kept between decisions (packed bits and atoms) and the peak of Python and numpy allocations
during the exact audit (``tracemalloc``).

Baseline in the same run: a floating-point audit, one SVD of the dense sets x
records matrix per decision (``QuerySetControl.isolated_record``), timed where its matrix fits in
``--baseline-max-gb``; its memory is that matrix (8 bytes per set and record) and the SVD's workspace.
A decision is ``released``, ``refused`` (with the rule), or ``inconclusive`` (the exact audit hit its
memory cap or search budget and refuses).
"""

from __future__ import annotations

import argparse
import csv
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from petlab.experiments import markdown
from petlab.experiments.audit_incremental import bench_incremental
from petlab.plaindata import acs_sample_path
from petlab.server.controller.analyses import AnalysisError, evaluate
from petlab.server.controller.output_checking import check
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.region_audit import RegionForm
from petlab.server.controller.release_audit import Functional
from petlab.server.controller.release_history import ReleaseHistory, released_functionals

SMALL_DOMAIN = ["sex", "incc", "race", "ms", "wc", "waob"]
SIZES = (10, 50, 200, 500, 1000, 2000)


def random_spec(rng: np.random.Generator, data: pd.DataFrame) -> dict:
    where: dict = {}
    for column in rng.choice(list(data.columns), size=int(rng.integers(1, 4)), replace=False):
        values = np.sort(data[column].unique())
        if column in ("age", "hpw") and rng.random() < 0.6:
            low = int(rng.integers(0, len(values) - 1))
            high = int(rng.integers(low, len(values)))
            where[str(column)] = {"between": [int(values[low]), int(values[high])]}
        else:
            chosen = rng.choice(
                values, size=int(rng.integers(1, max(2, len(values) // 2 + 1))), replace=False
            )
            where[str(column)] = {"in": sorted(int(v) for v in chosen)}
    kind = str(rng.choice(["count", "mean", "frequency", "magnitude"]))
    spec: dict = {"type": kind, "where": where}
    if kind == "mean":
        spec["column"] = "hpw"
    if kind in ("frequency", "magnitude"):
        spec["rows"] = str(rng.choice(SMALL_DOMAIN))
        if rng.random() < 0.5:
            spec["columns"] = str(rng.choice([c for c in SMALL_DOMAIN if c != spec["rows"]]))
        if rng.random() < 0.3:
            del spec["where"]
    if kind == "magnitude":
        spec.update({"value": "hpw", "statistic": "mean"})
    return spec


def next_candidate(
    rng: np.random.Generator, data: pd.DataFrame, history: ReleaseHistory, domain: PublicDomain | None = None
):
    """The next analysis to decide: the first of up to 200 random ones that output checking passes
    (so the decision reaches the history rules), else the last one drawn."""
    evaluated = None
    for _ in range(200):
        try:
            evaluated = evaluate(random_spec(rng, data), data, domain)
        except AnalysisError:
            continue
        if check(evaluated, history.rules).release:
            return evaluated
    assert evaluated is not None
    return evaluated


def _functional(row) -> Functional:
    return Functional(np.frombuffer(row.members, dtype=np.uint8), row.weight)


def float_svd_audit(history: ReleaseHistory, new_sets: list[np.ndarray]) -> float:
    """The floating-point baseline audit's work for one decision: the dense float matrix and its SVD."""
    assert history.audit is not None
    bits = history.audit.released_bits()
    rows = np.unpackbits(bits, axis=1, count=history.audit.n_records).astype(np.float64)
    rows = np.concatenate([rows, np.array(new_sets, dtype=np.float64)])
    start = time.perf_counter()
    _, singular, vt = np.linalg.svd(rows, full_matrices=False)
    basis = vt[singular > singular.max() * max(rows.shape) * np.finfo(float).eps]
    (basis**2).sum(axis=0)
    return time.perf_counter() - start


def _measured(check, *arguments):
    """``check(*arguments)``, its seconds and the peak of Python and numpy allocations meanwhile."""
    tracemalloc.start()
    start = time.perf_counter()
    finding = check(*arguments)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return finding, seconds, peak


def _outcome(finding) -> str:
    if finding is None:
        return "nothing determined"
    if finding.group_size:
        return f"a group of {finding.group_size} determined"
    return "inconclusive (refuses)"


def _grow(history: ReleaseHistory, rng: np.random.Generator, data: pd.DataFrame, domain, rows: int) -> list:
    """Record the released rows of random analyses (deduplicated, as the server stores them)
    until ``rows`` more are recorded; returns them."""
    stored: list = []
    while len(stored) < rows:
        try:
            evaluated = evaluate(random_spec(rng, data), data, domain)
        except AnalysisError:
            continue
        fresh = history.fresh(released_functionals(evaluated))[: rows - len(stored)]
        history.replay(fresh)
        stored += fresh
    return stored


def bench(data: pd.DataFrame, label: str, sizes: tuple[int, ...], seed: int, baseline_max_gb: float):
    rng = np.random.default_rng(seed)
    history = ReleaseHistory(data)
    assert history.audit is not None
    rows = []
    replay = 0.0
    for target in sizes:
        while history.n_released < target:
            try:
                evaluated = evaluate(random_spec(rng, data), data)
            except AnalysisError:
                continue
            start = time.perf_counter()
            history.replay(released_functionals(evaluated)[: target - history.n_released])
            replay += time.perf_counter() - start
        candidate = next_candidate(rng, data, history)
        start = time.perf_counter()
        reason = history.refusal(candidate)
        decision = time.perf_counter() - start
        functionals = [_functional(row) for row in released_functionals(candidate)]
        finding, seconds, peak = _measured(history.audit.check, functionals)
        outcome = _outcome(finding)
        decided = "released" if reason is None else "refused: " + reason.split(":")[0]
        baseline_gb = (history.n_released + 1 + len(candidate.query_sets)) * len(data) * 8 / 2**30
        baseline = (
            round(float_svd_audit(history, candidate.query_sets), 2)
            if baseline_gb <= baseline_max_gb
            else None
        )
        atoms = history.audit.n_atoms
        row = {
            "data": label,
            "records": len(data),
            "released_sets": history.n_released,
            "atoms": atoms,
            "decision_seconds": round(decision, 3),
            "decision": decided,
            "exact_audit_seconds": round(seconds, 3),
            "exact_audit_peak_mb": round(peak / 2**20, 1),
            "state_mb": round(history.audit.state_bytes() / 2**20, 2),
            "replay_seconds_total": round(replay, 2),
            "exact_audit": outcome,
            "miss_probability_bound": f"{history.audit.miss_probability():.1e}",
            "float_svd_seconds": baseline,
            "float_matrix_mb": round(baseline_gb * 1024, 1),
        }
        print(
            f"{label}: {row['released_sets']:>5} sets, {atoms:>6} atoms: exact audit {seconds:7.3f} s, "
            f"peak {row['exact_audit_peak_mb']:7.1f} MB ({outcome}), state {row['state_mb']:6.2f} MB; "
            f"decision {decision:.3f} s ({decided}); "
            f"float SVD {f'{baseline} s' if baseline is not None else 'not run'} over a "
            f"{row['float_matrix_mb']:.0f} MB matrix",
            flush=True,
        )
        rows.append(row)
    return rows


def bench_regions(data: pd.DataFrame, label: str, sizes: tuple[int, ...], seed: int, time_limit: float):
    """The region audit against released rows: the history is replayed from random
    analyses (deduplicated, as the server stores it) until it holds each size of released rows, then
    one more analysis's region check is timed (``RegionAudit.check``, both primes) with its peak
    memory; the state is the residues the region audit keeps (rank^2 and rank x the columns'
    domains on the cells; the record side is the release audit's basis). A restart replays the
    whole history: timed from nothing for each size. Stops at the first size whose replay exceeds
    ``time_limit`` seconds."""
    domain = PublicDomain.shipped_for(data)
    if domain is None:
        raise SystemExit("the region bench needs the ACS columns (the shipped public domain)")
    rng = np.random.default_rng(seed)
    history = ReleaseHistory(data, domain=domain)
    assert history.audit is not None and history.region_audit is not None
    stored: list = []
    out = []
    for target in sizes:
        stored += _grow(history, rng, data, domain, target - len(stored))
        start = time.perf_counter()
        restarted = ReleaseHistory(data, domain=domain)
        restarted.replay(stored)
        replay = time.perf_counter() - start
        candidate = next_candidate(rng, data, history, domain)
        rows = history.fresh(released_functionals(candidate))
        atoms = history.audit._refined([_functional(row) for row in rows])
        forms = [RegionForm(np.frombuffer(r.members, dtype=np.uint8), r.weight, r.definition) for r in rows]
        finding, seconds, peak = _measured(history.region_audit.check, forms, atoms)
        on_records, on_cells = history.region_audit.ranks()
        row = {
            "data": label,
            "records": len(data),
            "released_rows": len(stored),
            "record_atoms": history.audit.n_atoms,
            "rank_records": on_records,
            "rank_cells": on_cells,
            "gap": history.region_audit.gap,
            "check_forms": len(forms),
            "region_check_seconds": round(seconds, 3),
            "region_check_peak_mb": round(peak / 2**20, 1),
            "region_state_mb": round(history.region_audit.entries() * 8 / 2**20, 1),
            "restart_replay_seconds": round(replay, 2),
            "outcome": "released" if finding is None else "refused",
        }
        print(
            f"{label}: {len(stored):>6} rows, {row['record_atoms']:>6} atoms, ranks {on_records}/{on_cells}: "
            f"region check {seconds:.3f} s, peak {row['region_check_peak_mb']} MB, state "
            f"{row['region_state_mb']} MB; restart replay {replay:.1f} s",
            flush=True,
        )
        out.append(row)
        if replay > time_limit:
            break
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        action="append",
        help="CSV of ACS records (repeatable; default: the shipped 5,000-record sample)",
    )
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="numbers of released sets (comma-separated)"
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument(
        "--baseline-max-gb", type=float, default=1.0, help="run the float SVD baseline up to this matrix size"
    )
    parser.add_argument("--out", type=Path, default=Path("results/audit_bench.csv"), help="the CSV to write")
    parser.add_argument(
        "--regions",
        default="",
        help="also bench the region audit at these numbers of released rows (comma-separated)",
    )
    parser.add_argument(
        "--regions-time-limit", type=float, default=600.0, help="stop the region bench past this replay time"
    )
    parser.add_argument(
        "--incremental",
        default="",
        help="also bench the incremental audit at these numbers of released rows "
        "(comma-separated, e.g. 1000,10000,100000)",
    )
    parser.add_argument(
        "--incremental-time-limit",
        type=float,
        default=600.0,
        help="stop a workload of the incremental bench past this replay time (seconds)",
    )


def run(args: argparse.Namespace) -> int:
    sizes = tuple(int(s) for s in args.sizes.split(",") if s)
    rows = []
    region_rows = []
    incremental_rows = []
    for path in args.data or [acs_sample_path()]:
        data = pd.read_csv(path)
        if sizes:
            rows += bench(data, Path(path).name, sizes, args.seed, args.baseline_max_gb)
        if args.regions:
            region_sizes = tuple(int(s) for s in args.regions.split(","))
            limit = args.regions_time_limit
            region_rows += bench_regions(data, Path(path).name, region_sizes, args.seed, limit)
        if args.incremental:
            incremental_rows += bench_incremental(
                data,
                Path(path).name,
                tuple(int(s) for s in args.incremental.split(",")),
                args.seed,
                args.incremental_time_limit,
            )
    if incremental_rows:
        _write(args.out.with_name(args.out.stem + "_incremental.csv"), incremental_rows)
    if region_rows:
        _write(args.out.with_name(args.out.stem + "_regions.csv"), region_rows)
    if rows:
        _write(args.out, rows)
    return 0


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    path.with_suffix(".md").write_text(markdown.frame_table(pd.DataFrame(rows)) + "\n")
    print(f"written to {path}")
