"""``petlab-experiments demo``: a data owner's server and a device's client, separate processes on loopback.

Starts ``petlab-server`` on a free loopback port, waits for gRPC health SERVING, classifies held-out
Iris rows with ``petlab-client`` over both protocols (HE-kNN-V and the interactive Paillier
baseline), prints accuracy, latency and bytes each way, and stops the server with SIGTERM (which
drains in-flight calls). The server's data directory persists, so a second run loads the compiled
model from its cache instead of recompiling.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import pandas as pd
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.errors import PetlabError, Unavailable
from petlab.experiments import markdown
from petlab.server.knn.datasets import load_bundled

BIN = Path(sys.executable).parent


def wait_until_serving(process: subprocess.Popen, port_file: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Unavailable(f"petlab-server exited with status {process.returncode} (its log is above)")
        if port_file.is_file() and port_file.read_text().strip():
            port = int(port_file.read_text())
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                try:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=""), timeout=2
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return port
                except grpc.RpcError:
                    pass
        time.sleep(0.5)
    raise Unavailable(f"petlab-server did not report SERVING within {timeout:.0f} s (its log is above)")


def client_command(protocol: str, port: int, rows_csv: Path, stats_file: Path, cache: Path) -> list[str]:
    """The ``petlab-client`` command line the demo runs for ``protocol`` (classify or
    paillier-classify): the same flags for both."""
    return [
        str(BIN / "petlab-client"),
        protocol,
        "--server",
        f"127.0.0.1:{port}",
        "--model",
        "iris",
        "--csv",
        str(rows_csv),
        "--stats-json",
        str(stats_file),
        "--cache-dir",
        str(cache),
    ]


def run_client(protocol: str, port: int, rows_csv: Path, stats_file: Path, cache: Path) -> dict:
    command = client_command(protocol, port, rows_csv, stats_file, cache)
    print("$", " ".join(command[:7]), "...", flush=True)
    done = subprocess.run(command, stdout=subprocess.DEVNULL)
    if done.returncode:
        status = done.returncode
        raise PetlabError(f"petlab-client {protocol} exited with status {status} (its error is above)")
    return json.loads(stats_file.read_text())


def summarise(stats: dict, truth: list[str]) -> dict:
    calls = stats["calls"]
    per_query = [c for c in calls if c["method"] in ("Classify", "ClassifyBatch", "Distances", "Labels")]
    rows = stats["rows"]
    rounds = 2 if stats["protocol"] == "paillier-classify" else 1
    return {
        "protocol": "encrypted k-NN (TFHE)" if stats["protocol"] == "classify" else "Paillier interactive",
        "accuracy": float(np.mean([a == b for a, b in zip(stats["classes"], truth, strict=True)])),
        "latency_s": sum(c["seconds"] for c in per_query) / rows,
        "up_bytes": sum(c["bytes_sent"] for c in per_query) / rows,
        "down_bytes": sum(c["bytes_received"] for c in per_query) / rows,
        "rounds": rounds,
        "key_bytes": stats["evaluation_key_bytes"],
    }


def run_demo(rows: int = 3, data_dir: Path = Path(".petlab-cache/demo-server")) -> int:
    _, test = load_bundled("iris").split()
    picked = np.random.default_rng(0).choice(len(test.labels), size=rows, replace=False)
    truth = [test.class_names[test.labels[i]] for i in picked]
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        rows_csv = scratch / "rows.csv"
        pd.DataFrame(test.features[picked], columns=test.feature_names).to_csv(rows_csv, index=False)
        port_file = scratch / "port"
        server = subprocess.Popen(
            [
                str(BIN / "petlab-server"),
                "serve",
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--data-dir",
                str(data_dir),
                "--model",
                "iris",
                "--enable-paillier-baseline",  # the demo compares both protocols
            ],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            port = wait_until_serving(server, port_file, timeout=1200)
            print(f"server SERVING on 127.0.0.1:{port}", flush=True)
            cache = data_dir.parent / "demo-client"
            results = [
                summarise(run_client(p, port, rows_csv, scratch / f"{p}.json", cache), truth)
                for p in ("classify", "paillier-classify")
            ]
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
    print()
    print(f"{rows} held-out Iris rows, n = 40 training points, k = 3, 4-bit features")
    header = ["protocol", "accuracy", "latency/query", "bytes up/query", "bytes down/query", "rounds"]
    header += ["one-off key bytes"]
    cells = [
        [
            r["protocol"],
            f"{r['accuracy']:.2f}",
            f"{r['latency_s']:.3f} s",
            f"{r['up_bytes']:,.0f}",
            f"{r['down_bytes']:,.0f}",
            r["rounds"],
            f"{r['key_bytes']:,}",
        ]
        for r in results
    ]
    print(markdown.table(header, cells, align=["left"] + ["right"] * 6))
    print("Paillier leaks n, k, every distance (to the client) and the neighbours' indices (to the server).")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=3, help="held-out rows to classify")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".petlab-cache/demo-server"),
        help="the demo server's data directory (compile cache, keys)",
    )


def run(args: argparse.Namespace) -> int:
    return run_demo(args.rows, args.data_dir)
