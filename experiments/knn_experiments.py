"""Encrypted k-NN over real gRPC on loopback: HE-kNN-V, the interactive Paillier baseline and
clear k-NN, per data set (Ameur et al., PSD 2022, Tables 4-5), plus the sweeps against n, d and k
(Figures 7-9).

The harness starts the data owner's server in process on a free loopback port, with the models it
built for this run, and talks to it through :class:`petlab.experiments.wire.ByteCountingChannel`, so the
bytes reported are the serialized payloads gRPC carried. Client time (key generation once;
encryption and decryption per query) and server time (the RPC's wall time on loopback: the
server's computation plus (de)serialization) are measured separately. Clear k-NN runs on the
quantized features in process (no network); it is the baseline of every latency ratio.

Sweeps measure the compiled circuit in process (``experiments.knn_bench.bench_one``): PBS count,
server latency, key and ciphertext sizes against n, d (the first d Iris features) and k.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from petlab.client.knn_client import KnnRemote, make_channel
from petlab.crypto.knn_circuit import CircuitConfig
from petlab.crypto.knn_model import KnnSettings, build_model
from petlab.crypto.knn_reference import classify
from petlab.crypto.paillier_knn import (
    decrypt_distances,
    encrypt_query,
    from_bytes,
    generate_keypair,
    majority,
    nearest_indices,
    to_bytes,
)
from petlab.experiments.wire import ByteCountingChannel
from petlab.protos import knn_pb2, paillier_pb2, paillier_pb2_grpc
from petlab.server.datasets import load_bundled
from petlab.server.knn_service import HostedModel
from petlab.server.main import ServerOptions, start
from petlab.server.model_cache import load_or_compile

KNN_COLUMNS = [
    "dataset",
    "protocol",
    "n",
    "k",
    "d",
    "queries",
    "accuracy",
    "agrees_with_clear",
    "median_s",
    "p90_s",
    "client_keygen_s",
    "client_encrypt_s",
    "client_decrypt_s",
    "server_s",
    "bytes_up",
    "bytes_down",
    "key_bytes",
    "rounds",
    "over_clear",
]


def _stats(values: list[float]) -> tuple[float, float]:
    return float(np.median(values)), float(np.percentile(values, 90))


def run_dataset(name: str, settings: KnnSettings, queries: int, cache: Path, progress=None) -> list[dict]:
    """One data set, three protocols; ``queries`` held-out rows for the encrypted ones."""
    train, test = load_bundled(name).split()
    model = build_model(name, train.features, train.labels, settings, train.class_names, train.feature_names)
    levels = model.quantizer.transform(test.features)
    clear_all = classify(model.plan, levels)
    rows = np.random.default_rng(0).choice(len(levels), size=min(queries, len(levels)), replace=False)
    clear_times = []
    for i in range(len(levels)):
        started = time.perf_counter()
        classify(model.plan, levels[i : i + 1])
        clear_times.append(time.perf_counter() - started)
    clear_median, clear_p90 = _stats(clear_times)
    base = {"dataset": name, "n": settings.n, "k": settings.k, "d": model.d}
    results = [
        {
            **base,
            "protocol": "clear",
            "queries": len(levels),
            "accuracy": float(np.mean(clear_all == test.labels)),
            "agrees_with_clear": 1.0,
            "median_s": clear_median,
            "p90_s": clear_p90,
            "client_keygen_s": 0.0,
            "client_encrypt_s": 0.0,
            "client_decrypt_s": 0.0,
            "server_s": clear_median,
            "bytes_up": 0,
            "bytes_down": 0,
            "key_bytes": 0,
            "rounds": 0,
            "over_clear": 1.0,
        }
    ]
    compiled = load_or_compile(model, CircuitConfig(), cache / "models")
    with tempfile.TemporaryDirectory() as scratch:
        hosted = {name: HostedModel(model, compiled.server, dataset=name)}
        running = start(ServerOptions(data_dir=Path(scratch) / "server", models=[], port=0), hosted)
        try:
            channel = ByteCountingChannel(make_channel(f"127.0.0.1:{running.port}"))
            results.append(
                _he_knn(channel, name, rows, levels, test.labels, clear_all, Path(scratch), progress)
            )
            results.append(_paillier(channel, model, rows, levels, test.labels, clear_all, progress))
            channel.close()
        finally:
            running.stop(grace=1.0)
    for row in results:
        row.update(base)
        row["over_clear"] = row["median_s"] / clear_median
    return results


@dataclass
class QueryLog:
    """Per-query measurements of one protocol (seconds; bytes counted on the channel)."""

    encrypt_s: list[float] = field(default_factory=list)
    decrypt_s: list[float] = field(default_factory=list)
    server_s: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    up: list[int] = field(default_factory=list)
    down: list[int] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)

    def row(self, protocol: str, truth, clear, keygen_s: float, key_bytes: int, rounds: int) -> dict:
        """Medians over the queries (and p90 latency); one-off costs as measured."""
        median, p90 = _stats(self.latency_s)
        answers = np.asarray(self.answers)
        return {
            "protocol": protocol,
            "queries": len(answers),
            "accuracy": float(np.mean(answers == truth)),
            "agrees_with_clear": float(np.mean(answers == clear)),
            "median_s": median,
            "p90_s": p90,
            "client_keygen_s": keygen_s,
            "client_encrypt_s": float(np.median(self.encrypt_s)),
            "client_decrypt_s": float(np.median(self.decrypt_s)),
            "server_s": float(np.median(self.server_s)),
            "bytes_up": int(np.median(self.up)),
            "bytes_down": int(np.median(self.down)),
            "key_bytes": key_bytes,
            "rounds": rounds,
        }


def _he_knn(channel, name, rows, levels, labels, clear_all, scratch: Path, progress) -> dict:
    remote = KnnRemote(channel, "loopback", cache_dir=scratch / "client", show_progress=False)
    sent_before = channel.sent
    prepared = remote.prepare(name)
    key_bytes = channel.sent - sent_before
    log = QueryLog()
    for i in rows:
        begin = time.perf_counter()
        query = prepared.client.encrypt(levels[i])
        log.encrypt_s.append(time.perf_counter() - begin)
        request = knn_pb2.ClassifyRequest(model=name, key_id=prepared.key_id, encrypted_query=query)
        sent, received = channel.snapshot()
        started = time.perf_counter()
        reply = remote.stub.Classify(request)
        log.server_s.append(time.perf_counter() - started)
        log.up.append(channel.sent - sent)
        log.down.append(channel.received - received)
        started = time.perf_counter()
        log.answers.append(prepared.client.decrypt_class(reply.encrypted_class))
        log.decrypt_s.append(time.perf_counter() - started)
        log.latency_s.append(time.perf_counter() - begin)
        if progress is not None:
            progress.update()
    return log.row("HE-kNN-V", labels[rows], clear_all[rows], prepared.keygen_seconds, key_bytes, 1)


def _paillier(channel, model, rows, levels, labels, clear_all, progress) -> dict:
    started = time.perf_counter()
    public_key, private_key = generate_keypair()
    keygen_s = time.perf_counter() - started
    stub = paillier_pb2_grpc.PaillierKnnServiceStub(channel)
    log = QueryLog()
    for i in rows:
        sent, received = channel.snapshot()
        begin = time.perf_counter()
        encrypted, square_norm = encrypt_query(public_key, levels[i])
        request = paillier_pb2.DistancesRequest(
            model=model.name,
            public_key_n=to_bytes(public_key.n),
            encrypted_levels=[to_bytes(c) for c in encrypted],
            encrypted_square_norm=to_bytes(square_norm),
        )
        log.encrypt_s.append(time.perf_counter() - begin)
        started = time.perf_counter()
        reply = stub.Distances(request)
        first = time.perf_counter() - started
        started = time.perf_counter()
        distances = decrypt_distances(private_key, [from_bytes(c) for c in reply.encrypted_distances])
        nearest = nearest_indices(distances, reply.k)
        log.decrypt_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        labels_reply = stub.Labels(paillier_pb2.LabelsRequest(model=model.name, indices=nearest))
        log.server_s.append(first + time.perf_counter() - started)
        log.answers.append(majority(list(labels_reply.labels), len(model.class_names)))
        log.latency_s.append(time.perf_counter() - begin)
        log.up.append(channel.sent - sent)
        log.down.append(channel.received - received)
        if progress is not None:
            progress.update()
    return log.row("Paillier (interactive)", labels[rows], clear_all[rows], keygen_s, 0, 2)


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
    ns: list[int], ds: list[int], ks: list[int], queries: int, base_n: int, progress=None
) -> list[dict]:
    from petlab.experiments.knn_bench import bench_one

    points = (
        [("n", n, 3, None) for n in ns]
        + [("d", base_n, 3, d) for d in ds]
        + [("k", base_n, k, None) for k in ks]
    )
    out = []
    for sweep, n, k, d in points:
        r = bench_one(n, queries, "fast", k=k, d=d)
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
