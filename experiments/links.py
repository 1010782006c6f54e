"""``petlab-experiments links``: how long a device waits for its class over a real link, the first
time (keys made and uploaded) and every time after, beside the model rounds x RTT + bytes /
bandwidth + compute.

A real ``petlab-server serve`` process (``experiments.server_process``) and real ``petlab-client``
runs (``classify``; ``paillier-classify`` against ``--enable-paillier-baseline``) talk through an
emulated link (``experiments.link_relay``: each direction's bandwidth and a one-way delay; the
machine's kernel shaping is probed and stated). Every profile's link is measured (round trip,
throughput each way) before it is used.

Per family and profile: the *first* run (a fresh key cache: key generation, upload, the query) and
*later* runs (keys cached and registered: the query). Measured per run: the device's wall time,
its wait from the first call to the last reply plus key generation (``run_s``, what the model
predicts; the process's start-up and imports are not the link's), the query's own calls
(``query_s``: what each further query costs a device that keeps its connection), the bytes each
way on the wire (relay) and as protobuf payload (the client's ``--stats-json``), round trips, the
device's CPU seconds (the client process's rusage) beside the server's (its ``/proc`` times over
the run). The compute term of the model is each call's seconds on unshaped loopback (the same
server, a direct connection) in the same experiment (``experiments.link_model``).

``--quick`` (in ``petlab-experiments all --quick``): Iris at n = 10, the thermo family and the
Paillier baseline; the first query with its key upload only on the data-centre link (on the slower
links the upload alone takes a minute; the first-query figure moves the measured run to them by
the model, hatched), later queries on the home and mobile links.
``--full``: Iris at n = 40 (the paper family at n = 10: its 120 MB keys and slow queries), every
family, the first query on every profile, two later queries each, and later queries of the
thermo family and the baseline at more round-trip times (home broadband's bandwidth).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from petlab.experiments import link_figures, markdown
from petlab.experiments.link_model import (
    QUERY_METHODS,
    SETUP_METHODS,
    UPLOAD_METHODS,
    Call,
    query_model,
    rounds,
    run_model,
)
from petlab.experiments.link_relay import (
    PROFILES,
    LinkCheck,
    LinkProfile,
    LinkRelay,
    check_link,
    kernel_shaping,
)
from petlab.experiments.machine import describe
from petlab.experiments.server_process import ServerProcess

CLIENT = Path(sys.executable).with_name("petlab-client")
LOOPBACK = LinkProfile("loopback", float("inf"), float("inf"), 0.0, "no link: the compute baseline")
RUN_SECONDS = 1200.0  # one client run, the slowest upload included
# the margin the note states: |measured / model - 1| of a whole run
MARGIN = 0.15


@dataclass(frozen=True)
class LinksConfig:
    n: int = 10
    paper_n: int = 10
    families: tuple[str, ...] = ("thermo", "paillier")
    first_on: tuple[str, ...] = ("data-centre",)  # profiles whose first query is measured
    later_on: tuple[str, ...] = ("home", "mobile")  # profiles whose later queries are measured
    later_runs: int = 1  # later queries per profile
    baseline_later: int = 0  # later queries on loopback (the first run gives every call's compute)
    rtt_sweep_ms: tuple[float, ...] = ()
    rtt_sweep_families: tuple[str, ...] = ("thermo", "paillier")
    profiles: tuple[LinkProfile, ...] = PROFILES


QUICK = LinksConfig()
FULL = LinksConfig(
    n=40,
    families=("thermo", "fast", "paper", "paillier"),
    first_on=tuple(p.name for p in PROFILES),
    later_on=tuple(p.name for p in PROFILES),
    later_runs=2,
    baseline_later=2,
    rtt_sweep_ms=(2, 100, 300, 1000),
)

COLUMNS = [
    "family", "n", "profile", "up_mbit", "down_mbit", "rtt_ms", "phase", "wall_s", "keygen_s", "setup_s",
    "upload_s", "query_s", "run_s", "calls", "rounds", "wire_up", "wire_down", "payload_up",
    "payload_down", "query_rounds", "query_up", "query_down", "key_bytes", "device_cpu_s",
    "server_cpu_s", "model_run_s", "model_query_s", "run_gap", "query_gap", "reuploaded",
]  # fmt: skip


@dataclass
class ClientRun:
    """What one ``petlab-client`` process did and cost."""

    calls: list[Call]
    wall_s: float
    keygen_s: float
    device_cpu_s: float
    server_cpu_s: float
    wire_up: int
    wire_down: int
    key_bytes: int
    answer: str = ""
    extra: dict = field(default_factory=dict)

    def seconds(self, methods: set[str]) -> float:
        return sum(c.seconds for c in self.calls if c.method in methods)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_client(
    protocol: str, address: str, features: str, cache: Path, server_pid: int, scratch: Path
) -> ClientRun:
    """One ``petlab-client classify`` or ``paillier-classify`` process against ``address``."""
    stats = scratch / "stats.json"
    stats.unlink(missing_ok=True)
    command = [str(CLIENT), protocol, "--server", address, "--model", "iris", "--features", features]
    command += ["--stats", "--stats-json", str(stats), "--quiet", "--timeout", str(RUN_SECONDS)]
    if protocol == "classify":
        command += ["--cache-dir", str(cache)]
    out, err = scratch / "stdout", scratch / "stderr"
    server_before = _cpu_seconds(server_pid)
    began = time.monotonic()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr)
        timer = threading.Timer(RUN_SECONDS, process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - began
    server_cpu = _cpu_seconds(server_pid) - server_before
    if process.returncode != 0:
        raise RuntimeError(
            f"petlab-client {protocol} failed ({process.returncode}): {err.read_text()[-2000:]}"
        )
    found = re.search(r"keygen ([0-9.]+) s", err.read_text())
    data = json.loads(stats.read_text())
    calls = [Call(c["method"], c["seconds"], c["bytes_sent"], c["bytes_received"]) for c in data["calls"]]
    return ClientRun(
        calls,
        wall,
        float(found.group(1)) if found else 0.0,
        usage.ru_utime + usage.ru_stime,
        server_cpu,
        0,
        0,
        int(data["evaluation_key_bytes"]),
        out.read_text().strip(),
    )


def compute_terms(runs: list[ClientRun]) -> dict[str, float]:
    """Each method's median seconds over the loopback runs: the model's compute term."""
    seconds: dict[str, list[float]] = {}
    for run in runs:
        for call in run.calls:
            seconds.setdefault(call.method, []).append(call.seconds)
    return {method: statistics.median(values) for method, values in seconds.items()}


def row(
    family: str, profile: LinkProfile, phase: str, run: ClientRun, compute: dict[str, float], n: int = 0
) -> dict:
    """One CSV row: the run's measurements beside its model (``n``: the server's training points)."""
    run_s = run.keygen_s + sum(c.seconds for c in run.calls)
    query_s = run.seconds(QUERY_METHODS)
    finite = profile.up_mbit != float("inf")
    model_run = (
        run_model(run.calls, compute, run.keygen_s, run.wire_up, run.wire_down, profile) if finite else None
    )
    model_query = query_model(run.calls, compute, profile) if finite else None
    return {
        "family": family,
        "n": n,
        "profile": profile.name,
        "up_mbit": profile.up_mbit,
        "down_mbit": profile.down_mbit,
        "rtt_ms": profile.rtt_ms,
        "phase": phase,
        "wall_s": run.wall_s,
        "keygen_s": run.keygen_s,
        "setup_s": run.seconds(SETUP_METHODS),
        "upload_s": run.seconds(UPLOAD_METHODS),
        "query_s": query_s,
        "run_s": run_s,
        "calls": len(run.calls),
        "rounds": rounds(run.calls),
        "wire_up": run.wire_up,
        "wire_down": run.wire_down,
        "payload_up": sum(c.bytes_sent for c in run.calls),
        "payload_down": sum(c.bytes_received for c in run.calls),
        "query_rounds": sum(1 for c in run.calls if c.method in QUERY_METHODS),
        "query_up": sum(c.bytes_sent for c in run.calls if c.method in QUERY_METHODS),
        "query_down": sum(c.bytes_received for c in run.calls if c.method in QUERY_METHODS),
        "key_bytes": run.key_bytes,
        "device_cpu_s": run.device_cpu_s,
        "server_cpu_s": run.server_cpu_s,
        "model_run_s": model_run,
        "model_query_s": model_query,
        "run_gap": run_s / model_run - 1 if model_run else None,
        "query_gap": query_s / model_query - 1 if model_query else None,
        "reuploaded": phase == "later" and any(c.method in UPLOAD_METHODS for c in run.calls),
    }


@dataclass
class Session:
    """One server, its relay, and the runs against it."""

    server: ServerProcess
    relay: LinkRelay
    scratch: Path
    features: str
    n: int
    rows: list[dict] = field(default_factory=list)
    retries: int = 0

    def run(
        self, family: str, profile: LinkProfile, phase: str, cache: Path, compute: dict | None
    ) -> ClientRun:
        protocol = "paillier-classify" if family == "paillier" else "classify"
        direct = profile is LOOPBACK
        if not direct:
            self.relay.profile = profile
            self.relay.reset()
        address = self.server.address if direct else self.relay.address
        try:
            result = run_client(protocol, address, self.features, cache, self.server.pid, self.scratch)
        except RuntimeError as exc:
            # a connection lost once is the loaded machine's, not the link's: said, and run again
            # (a first query again from a fresh cache)
            print(f"links: {family} over {profile.name} ({phase}) failed, once: {exc}", flush=True)
            if phase == "first":
                shutil.rmtree(cache)
                cache.mkdir()
            if not direct:
                self.relay.reset()
            self.retries += 1
            result = run_client(protocol, address, self.features, cache, self.server.pid, self.scratch)
        if not direct:
            _, result.wire_up, result.wire_down = self.relay.totals()
        if compute is not None:
            self.rows.append(row(family, profile, phase, result, compute, self.n))
        return result


def measure_family(session: Session, family: str, config: LinksConfig, progress) -> None:
    """The loopback baseline, then every profile (first, later), then the RTT sweep, for one family."""
    keyed = family != "paillier"

    def fresh() -> Path:
        return Path(tempfile.mkdtemp(dir=session.scratch, prefix=f"{family}-cache-"))

    cache = fresh()
    baseline = [session.run(family, LOOPBACK, "first", cache, None)]
    baseline += [
        session.run(family, LOOPBACK, "later", cache, None) for _ in range(max(1, config.later_runs))
    ]
    compute = compute_terms(baseline)
    for phase, run in zip(["first"] + ["later"] * (len(baseline) - 1), baseline, strict=True):
        session.rows.append(row(family, LOOPBACK, phase, run, compute, session.n))
    progress(f"{family}: loopback")
    relay_cache: Path | None = None
    for profile in config.profiles:
        if profile.name in config.first_on:
            relay_cache = fresh()
            session.run(family, profile, "first", relay_cache, compute)
            progress(f"{family}: {profile.name} first")
        if profile.name not in config.later_on:
            continue
        if relay_cache is None:
            # later queries need keys registered under the relay's address: made and uploaded once,
            # over the fastest profile, and not reported
            relay_cache = fresh()
            if keyed:
                session.run(family, config.profiles[0], "first", relay_cache, None)
        for _ in range(config.later_runs):
            session.run(family, profile, "later", relay_cache, compute)
        progress(f"{family}: {profile.name} later")
    if family in config.rtt_sweep_families:
        home = next(p for p in config.profiles if p.name == "home")
        sweep_cache = relay_cache
        if sweep_cache is None:  # keys registered once, over the fastest profile, not reported
            sweep_cache = fresh()
            session.run(family, config.profiles[0], "first", sweep_cache, None)
        for rtt in config.rtt_sweep_ms:
            session.run(family, home.with_rtt(rtt), "later", sweep_cache, compute)
        if config.rtt_sweep_ms:
            progress(f"{family}: RTT sweep")


def server_groups(config: LinksConfig) -> list[tuple[list[str], list[str], str, int]]:
    """(families, server arguments, label, n) per server: thermo with the Paillier baseline, then
    the other encrypted families, each a server of its own."""
    groups = []
    first = [f for f in config.families if f in ("thermo", "paillier")]
    if first:
        arguments = ["--algorithm", "thermo", "--n", str(config.n), "--enable-paillier-baseline"]
        groups.append((first, arguments, f"thermo-n{config.n}", config.n))
    for family in config.families:
        if family in ("fast", "paper"):
            n = config.paper_n if family == "paper" else config.n
            groups.append(([family], ["--algorithm", family, "--n", str(n)], f"{family}-n{n}", n))
    return groups


def query_features() -> str:
    """A held-out Iris row, as ``--features`` takes it."""
    from petlab.server.knn.datasets import load_bundled

    _, test = load_bundled("iris").split()
    return ",".join(f"{v:g}" for v in test.features[0])


def check_profiles(config: LinksConfig) -> list[LinkCheck]:
    profiles = list(config.profiles)
    if config.rtt_sweep_ms:
        home = next(p for p in config.profiles if p.name == "home")
        profiles += [home.with_rtt(r) for r in config.rtt_sweep_ms]
    return [check_link(p) for p in profiles]


def run_links(
    config: LinksConfig, out: Path, cache: Path, machine: str | None = None
) -> tuple[dict[str, pd.DataFrame], list[Path], list[str]]:
    """Every measurement of ``config``, written to ``out`` (``links.csv``: one row a run;
    ``links_check.csv``: each link measured against its profile), then :func:`write_outputs`."""
    out.mkdir(parents=True, exist_ok=True)
    shaping = kernel_shaping()
    checks = check_profiles(config)
    features = query_features()
    rows: list[dict] = []
    retries = 0
    began = time.monotonic()

    def progress(what: str) -> None:
        print(f"links: {what} ({time.monotonic() - began:.0f} s)", flush=True)

    with tempfile.TemporaryDirectory(prefix="petlab-links-") as scratch_name:
        scratch = Path(scratch_name)
        for families, arguments, label, n in server_groups(config):
            server = ServerProcess(cache / "links" / label, ["--model", "iris", *arguments])
            try:
                with LinkRelay(("127.0.0.1", server.port), config.profiles[0]) as relay:
                    session = Session(server, relay, scratch, features, n)
                    progress(f"server {label} up")
                    for family in families:
                        measure_family(session, family, config, progress)
                    rows += session.rows
                    retries += session.retries
            finally:
                server.stop()
    pd.DataFrame(rows, columns=COLUMNS).to_csv(out / "links.csv", index=False)
    check_frame = pd.DataFrame(
        [
            {
                "profile": c.profile.name,
                "stands_for": c.profile.stands_for,
                "up_mbit": c.profile.up_mbit,
                "down_mbit": c.profile.down_mbit,
                "rtt_ms": c.profile.rtt_ms,
                "measured_up_mbit": c.up_mbit,
                "measured_down_mbit": c.down_mbit,
                "measured_rtt_ms": c.rtt_ms,
                "measured_rtt_median_ms": c.rtt_median_ms,
                "measured_setup_ms": c.setup_ms,
                "kernel_shaping": shaping,
                "mode": "full" if config == FULL else "quick",
                "client_runs_repeated": retries,
            }
            for c in checks
        ]
    )
    check_frame.to_csv(out / "links_check.csv", index=False)
    return write_outputs(out, machine or describe())


def write_outputs(out: Path, machine: str) -> tuple[dict[str, pd.DataFrame], list[Path], list[str]]:
    """From ``links.csv`` and ``links_check.csv`` in ``out``: ``links_summary.csv``, the figures,
    ``links.md`` and ``links_note.md`` (the note alone; ``--replot`` runs only this)."""
    frame = pd.read_csv(out / "links.csv")
    checks = pd.read_csv(out / "links_check.csv")
    summary = summarise(frame)
    summary.to_csv(out / "links_summary.csv", index=False)
    figures = link_figures.figures(frame, out, machine)
    notes = note(frame, summary, checks)
    mode = checks["mode"].iloc[0]
    body = [f"# Latency over emulated links ({mode})", "", f"Machine and software: {machine}", "", *notes, ""]
    body += [f"![{p.stem}]({p.name})" for p in figures]
    (out / "links.md").write_text("\n".join(body) + "\n")
    (out / "links_note.md").write_text("\n".join(notes) + "\n")  # the benchmarks page includes it
    return {"links": frame, "links_summary": summary, "links_check": checks}, figures, notes


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Per family, profile and phase (the RTT sweep's profiles excluded): medians of the runs."""
    named = {p.name for p in PROFILES} | {LOOPBACK.name}
    part = frame[frame.profile.isin(named)]
    numeric = [
        "wall_s",
        "keygen_s",
        "upload_s",
        "query_s",
        "run_s",
        "model_run_s",
        "model_query_s",
        "rounds",
        "wire_up",
        "wire_down",
        "device_cpu_s",
        "server_cpu_s",
    ]
    grouped = part.groupby(["family", "profile", "phase"], sort=False)[numeric].median().reset_index()
    grouped["runs"] = part.groupby(["family", "profile", "phase"], sort=False).size().to_numpy()
    grouped["run_gap"] = grouped.run_s / grouped.model_run_s - 1
    return grouped


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def summary_table(summary: pd.DataFrame) -> str:
    header = [
        "family",
        "link",
        "phase",
        "runs",
        "wait s (model)",
        "gap",
        "query s (model)",
        "keygen s",
        "upload s",
        "rounds",
        "MB up",
        "MB down",
        "device CPU s",
        "server CPU s",
        "process wall s",
    ]
    cells = [
        [
            r.family, r.profile, r.phase, r.runs,
            f"{r.run_s:.2f} ({_fmt(r.model_run_s)})",
            f"{r.run_gap:+.0%}" if pd.notna(r.run_gap) else "-",
            f"{r.query_s:.3f} ({_fmt(r.model_query_s)})", f"{r.keygen_s:.2f}", f"{r.upload_s:.2f}",
            int(r.rounds),
            f"{r.wire_up / 1e6:.3f}" if r.wire_up else "-",
            f"{r.wire_down / 1e6:.3f}" if r.wire_down else "-",
            f"{r.device_cpu_s:.2f}", f"{r.server_cpu_s:.2f}", f"{r.wall_s:.2f}",
        ]
        for r in summary.itertuples()
    ]  # fmt: skip
    return markdown.table(header, cells, align=["left"] * 3 + ["right"] * 12)


def note(frame: pd.DataFrame, summary: pd.DataFrame, checks: pd.DataFrame) -> list[str]:
    """The Markdown note: how the link was made and checked, the table, the margin."""
    shaping = checks.kernel_shaping.iloc[0]
    named = checks[checks.profile.isin([p.name for p in PROFILES])]
    sizes = ", ".join(
        f"{family} n = {n}" for family, n in frame.groupby("family", sort=False).n.first().items()
    )
    repeated = int(checks.client_runs_repeated.iloc[0])
    check_cells = [
        [
            r.profile,
            f"{r.up_mbit:g} / {r.down_mbit:g}",
            f"{r.measured_up_mbit:.4g} / {r.measured_down_mbit:.4g}",
            f"{r.rtt_ms:g}",
            f"{r.measured_rtt_ms:.3g}",
            f"{r.measured_setup_ms:.3g}",
        ]
        for r in checks.itertuples()
    ]
    lines = [
        f"Kernel shaping on this machine: {shaping}. The links are the loopback relay"
        " (`experiments/link_relay.py`: each direction's bandwidth and half the RTT, TCP's handshake;"
        " no slow start, loss or per-packet headers), measured before use:",
        "",
        markdown.table(
            ["profile", "Mbit/s up / down", "measured", "RTT ms", "measured", "connect to first reply ms"],
            check_cells,
            align=["left"] + ["right"] * 5,
        ),
        "",
        "Profiles: " + "; ".join(f"**{r.profile}**: {r.stands_for}" for r in named.itertuples()) + ".",
        "",
        f"Iris ({sizes}; the Paillier baseline on the thermo server's points), k = 3, one held-out row"
        " per run."
        " `wait s`: the device's wait from its first call to its last reply plus key generation (the"
        " model's subject; `process wall s` adds the client's start-up and imports); `query s`: the"
        " query's own calls (what each further query costs on a kept connection; 1 round for the"
        " encrypted k-NN, 2 for Paillier); model in brackets: rounds x RTT + wire bytes / bandwidth +"
        " each call's loopback seconds (+ key generation). `first`: a fresh key cache (keys made and"
        " uploaded); `later`: keys cached and registered. Medians of the runs.",
        "",
        summary_table(summary),
        "",
    ]
    lines += _margin(frame)
    if repeated:
        lines += ["", f"{repeated} client run(s) lost their connection once and were run again."]
    return lines


def _margin(frame: pd.DataFrame) -> list[str]:
    """How far the measured runs over a shaped link are from the model, split by what dominates
    the model: the link or the compute."""
    shaped = frame[frame.model_run_s.notna()].copy()
    if not len(shaped):
        return []
    gaps = shaped.run_gap.abs()
    # a run's link share: the part of its model that is rounds x RTT + bytes / bandwidth
    shaped["link_share"] = [1 - link_figures.run_fixed(r) / r.model_run_s for _, r in shaped.iterrows()]
    linked = shaped[shaped.link_share >= 0.5]
    computed = shaped[shaped.link_share < 0.5]
    if len(linked):
        link_part = (
            f"The margin holds where the link is what the model is about: {_gap_range(linked)} of"
            " the runs whose model is mostly link (rounds x RTT + bytes / bandwidth at least half of"
            " it: the first queries over slow links, the long round trips)."
        )
    else:
        link_part = "No run here is mostly link (rounds x RTT + bytes / bandwidth under half its model)."
    return [
        f"Measured against model, whole runs over a shaped link: {int((gaps <= MARGIN).sum())} of"
        f" {len(shaped)} within {MARGIN:.0%}. {link_part} Where compute dominates,"
        f" {_gap_range(computed)}: the compute term is each call's seconds in other runs (loopback)"
        " on a shared 2-core machine, and the same query's evaluation itself varied that much"
        f" between runs ({_spread(frame)}), so those gaps are the machine's load, not the link's.",
    ]


def _gap_range(runs: pd.DataFrame) -> str:
    if not len(runs):
        return "none"
    inside = int((runs.run_gap.abs() <= MARGIN).sum())
    low, high = runs.run_gap.min(), runs.run_gap.max()
    return f"{inside} of {len(runs)} within {MARGIN:.0%} (gaps {low:+.0%} to {high:+.0%})"


def _spread(frame: pd.DataFrame) -> str:
    """Per encrypted family: the range of its query's seconds over every run, any link."""
    parts = []
    for family, rows in frame[frame.family != "paillier"].groupby("family", sort=False):
        parts.append(f"{family} {rows.query_s.min():.2f}-{rows.query_s.max():.2f} s")
    return "; ".join(parts) or "no encrypted family"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="Iris n = 10, thermo and Paillier, a minute (default)"
    )
    size.add_argument("--full", action="store_true", help="every family, every first query (20-30 minutes)")
    parser.add_argument(
        "--out", type=Path, help="results directory (default results/links-quick, or results for --full)"
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(".petlab-cache"), help="the servers' compiled models"
    )
    parser.add_argument(
        "--replot",
        type=Path,
        metavar="DIR",
        help="measure nothing: the summary, figures and note again from DIR's links.csv and links_check.csv",
    )


def run(args: argparse.Namespace) -> int:
    config = FULL if args.full else QUICK
    out = args.out or Path("results" if args.full else "results/links-quick")
    if args.replot:
        tables, figures, _ = write_outputs(args.replot, describe())
        out = args.replot
    else:
        tables, figures, _ = run_links(config, out, args.cache_dir)
    print((out / "links.md").read_text())
    print(f"wrote {len(tables)} CSV tables, {len(figures)} figures and {out / 'links.md'}")
    return 0
