"""Encrypted k-NN over real gRPC on loopback: the circuit families (thermo, fast, the paper's
HE-kNN-V), the interactive Paillier baseline and clear k-NN, per data set (Ameur et al., PSD 2022,
Tables 4-5), plus the sweeps against n, d and k (Figures 7-9) for the default family.

The harness starts the data owner's server in process on a free loopback port, hosting one model
per family (``<data set>-<family>``), and talks to it through the clients a
user runs (``petlab.client.knn_client.KnnRemote``, ``petlab.client.paillier_client``) over
``petlab.client.call_stats.CallRecorder``, so the bytes reported are the serialized payloads
gRPC carried. ``server_s`` is the RPCs' wall time on loopback (the server's computation
plus (de)serialization); ``client_s`` is the rest of a query's latency (quantization, encryption,
decryption). Clear k-NN (textbook k-NN on the first family's quantized points; Paillier computes
the same) runs in process; it is the baseline of every latency ratio. ``agrees_with_clear``
compares each encrypted protocol with the clear reference of its own integer algorithm (Paillier:
textbook k-NN).

Sweeps measure the compiled default (thermo) circuit in process (``experiments.knn_bench.bench_one``).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
import numpy as np

from petlab.client.call_stats import CallRecorder, CallStats
from petlab.client.knn_client import KnnRemote, make_channel
from petlab.client.paillier_client import paillier_classify
from petlab.crypto.knn.families import ALGORITHMS, DEFAULT_ALGORITHM, classify_clear
from petlab.crypto.knn.model import KnnModel, KnnSettings, build_model
from petlab.crypto.knn.paper.reference import classify_by_sorting as textbook_knn
from petlab.crypto.paillier_knn import generate_keypair
from petlab.server.app import ServerOptions, start
from petlab.server.knn.datasets import load_bundled, owner_settings
from petlab.server.knn.model_cache import load_or_compile
from petlab.server.knn.service import HostedModel

PROTOCOLS = {"thermo": "HE k-NN thermo", "fast": "HE k-NN fast", "paper": "HE-kNN-V (paper)"}
PAILLIER = "Paillier (interactive)"

KNN_COLUMNS = [
    "dataset",
    "protocol",
    "n",
    "k",
    "d",
    "queries",
    "accuracy",
    "encrypted_accuracy",
    "agrees_with_clear",
    "median_s",
    "p90_s",
    "client_keygen_s",
    "client_s",
    "server_s",
    "bytes_up",
    "bytes_down",
    "key_bytes",
    "rounds",
    "over_clear",
]


def _stats(values: list[float]) -> tuple[float, float]:
    return float(np.median(values)), float(np.percentile(values, 90))


@dataclass
class QueryLog:
    """Per-query measurements of one protocol (seconds; bytes counted on the channel)."""

    server_s: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    up: list[int] = field(default_factory=list)
    down: list[int] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)

    def row(
        self, protocol: str, truth, clear, keygen_s: float, key_bytes: int, rounds: int, accuracy: float
    ) -> dict:
        """Medians over the queries (and p90 latency); one-off costs as measured. ``accuracy`` is
        the protocol's integer algorithm on the whole held-out split (its clear reference, which
        the encrypted answers equal); ``encrypted_accuracy`` only covers the queried rows (a
        smoke test when they are few)."""
        median, p90 = _stats(self.latency_s)
        answers = np.asarray(self.answers)
        return {
            "protocol": protocol,
            "queries": len(answers),
            "accuracy": accuracy,
            "encrypted_accuracy": float(np.mean(answers == truth)),
            "agrees_with_clear": float(np.mean(answers == clear)),
            "median_s": median,
            "p90_s": p90,
            "client_keygen_s": keygen_s,
            "client_s": float(np.median(np.subtract(self.latency_s, self.server_s))),
            "server_s": float(np.median(self.server_s)),
            "bytes_up": int(np.median(self.up)),
            "bytes_down": int(np.median(self.down)),
            "key_bytes": key_bytes,
            "rounds": rounds,
        }


def progress_steps(queries: int, families: tuple[str, ...] = ALGORITHMS) -> int:
    """What :func:`run_dataset` advances a progress bar by: one step per query and protocol (every
    encrypted family, then Paillier)."""
    return (len(families) + 1) * queries


def family_settings(name: str, settings: KnnSettings, family: str, owner: bool) -> KnnSettings:
    """``settings`` for ``family``; with ``owner``, thermo takes the owner's bits and distance for
    the data set (``server.knn.datasets.owner_settings``) at ``settings.n``."""
    if owner and family == "thermo":
        return replace(owner_settings(name), n=settings.n, k=settings.k)
    return replace(settings, algorithm=family, distance=None)


def run_dataset(
    name: str,
    settings: KnnSettings,
    queries: int,
    cache: Path,
    progress=None,
    families: tuple[str, ...] = ALGORITHMS,
    owner: bool = False,
) -> list[dict]:
    """One data set: clear k-NN, the encrypted ``families`` and Paillier on ``queries`` held-out rows."""
    train, test = load_bundled(name).split()
    models = {
        algorithm: build_model(
            f"{name}-{algorithm}",
            train.features,
            train.labels,
            family_settings(name, settings, algorithm, owner),
            train.class_names,
            train.feature_names,
        )
        for algorithm in families
    }
    # the clear baseline and Paillier's target: textbook k-NN on the first family's points
    exact = models[families[0]]
    levels = exact.quantizer.transform(test.features)
    clear_all, clear_row = _clear(exact, levels, test.labels)
    clear_median = clear_row["median_s"]
    rows = np.random.default_rng(0).choice(len(levels), size=min(queries, len(levels)), replace=False)
    base = {"dataset": name, "n": settings.n, "k": settings.k, "d": exact.d}
    results: list[dict] = [clear_row]
    hosted = {}
    for model in models.values():
        compiled = load_or_compile(model, model.circuit_config(), cache / "models")
        hosted[model.name] = HostedModel(model, compiled.server, dataset=name)
    with tempfile.TemporaryDirectory() as scratch:
        options = ServerOptions.of(Path(scratch) / "server", models=[], port=0, enable_paillier_baseline=True)
        running = start(options, hosted)
        try:
            wire = CallRecorder()
            channel = grpc.intercept_channel(make_channel(f"127.0.0.1:{running.port}"), wire)
            remote = KnnRemote(channel, "loopback", cache_dir=Path(scratch) / "client", show_progress=False)
            for algorithm, model in models.items():
                results.append(_encrypted(remote, wire, model, rows, test, algorithm, progress))
            results.append(_paillier(channel, wire, remote, exact, rows, test, clear_all, progress))
            channel.close()
        finally:
            running.stop(grace=1.0)
    for row in results:
        row.update(base)
        row["over_clear"] = row["median_s"] / clear_median
    return results


def _clear(exact: KnnModel, levels: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, dict]:
    """Textbook k-NN on ``exact``'s points (the clear baseline and Paillier's target): its class
    for every held-out row and its row of the table (one query at a time, timed)."""
    plan = exact.plan

    def textbook(queries: np.ndarray) -> np.ndarray:
        return textbook_knn(plan.train, plan.labels, plan.k, plan.n_classes, queries)

    clear_all = textbook(levels)
    clear_times = []
    for i in range(len(levels)):
        started = time.perf_counter()
        textbook(levels[i : i + 1])
        clear_times.append(time.perf_counter() - started)
    clear_median, clear_p90 = _stats(clear_times)
    return clear_all, {
        "protocol": "clear",
        "queries": len(levels),
        "accuracy": float(np.mean(clear_all == labels)),
        "encrypted_accuracy": float("nan"),
        "agrees_with_clear": 1.0,
        "median_s": clear_median,
        "p90_s": clear_p90,
        "client_keygen_s": 0.0,
        "client_s": clear_median,
        "server_s": 0.0,
        "bytes_up": 0,
        "bytes_down": 0,
        "key_bytes": 0,
        "rounds": 0,
    }


def _encrypted(
    remote: KnnRemote, wire: CallRecorder, model: KnnModel, rows, test, algorithm: str, progress
) -> dict:
    """The user's path: ``KnnRemote.prepare`` (keys, upload, warm-up) and ``KnnRemote.classify``."""
    sent_before = wire.totals()[0]
    prepared = remote.prepare(model.name)
    key_bytes = wire.totals()[0] - sent_before
    reference = classify_clear(model.plan, model.quantizer.transform(test.features))
    log = QueryLog()
    for i in rows:
        sent, received = wire.totals()
        calls = len(remote.stats)
        begin = time.perf_counter()
        log.answers.append(remote.classify(prepared, test.features[i]))
        log.latency_s.append(time.perf_counter() - begin)
        log.server_s.append(sum(s.seconds for s in remote.stats[calls:]))
        log.up.append(wire.totals()[0] - sent)
        log.down.append(wire.totals()[1] - received)
        if progress is not None:
            progress.update()
    return log.row(
        PROTOCOLS[algorithm],
        test.labels[rows],
        reference[rows],
        prepared.keygen_seconds,
        key_bytes,
        1,
        float(np.mean(reference == test.labels)),
    )


def _paillier(
    channel, wire: CallRecorder, remote: KnnRemote, model: KnnModel, rows, test, clear_all, progress
) -> dict:
    """The user's path: :func:`paillier_classify` (two rounds) against the same n points."""
    info = next(m for m in remote.models() if m.name == model.name)
    started = time.perf_counter()
    keypair = generate_keypair()
    keygen_s = time.perf_counter() - started
    log = QueryLog()
    for i in rows:
        sent, received = wire.totals()
        stats: list[CallStats] = []
        begin = time.perf_counter()
        log.answers.append(paillier_classify(channel, info, test.features[i], keypair, stats))
        log.latency_s.append(time.perf_counter() - begin)
        log.server_s.append(sum(s.seconds for s in stats))
        log.up.append(wire.totals()[0] - sent)
        log.down.append(wire.totals()[1] - received)
        if progress is not None:
            progress.update()
    return log.row(
        PAILLIER, test.labels[rows], clear_all[rows], keygen_s, 0, 2, float(np.mean(clear_all == test.labels))
    )


SWEEP_COLUMNS = [
    "sweep",
    "n",
    "k",
    "d",
    "pbs_count",
    "server_median_s",
    "eval_key_bytes",
    "query_bytes",
    "result_bytes",
    "clear_median_s",
    "server_over_clear",
    "encrypted_equals_clear",
]


def run_sweeps(
    ns: list[int],
    ds: list[int],
    ks: list[int],
    queries: int,
    base_n: int,
    progress=None,
    family: str = DEFAULT_ALGORITHM,
) -> list[dict]:
    from petlab.experiments.knn_bench import bench_one

    points = (
        [("n", n, 3, None) for n in ns]
        + [("d", base_n, 3, d) for d in ds]
        + [("k", base_n, k, None) for k in ks]
    )
    out = []
    for sweep, n, k, d in points:
        r = bench_one(n, queries, family, k=k, d=d)
        out.append(
            {
                "sweep": sweep,
                "n": n,
                "k": k,
                "d": r["d"],
                "pbs_count": r["pbs_count"],
                "server_median_s": r["server_median_s"],
                "eval_key_bytes": r["eval_key_bytes_compressed"],
                "query_bytes": r["query_bytes"],
                "result_bytes": r["result_bytes"],
                "clear_median_s": r["clear_median_s"],
                "server_over_clear": r["server_median_s"] / r["clear_median_s"],
                "encrypted_equals_clear": r["encrypted_equals_clear"],
            }
        )
        if progress is not None:
            progress.update()
    return out
