"""The cluster's health flips cannot freeze the server either.

A real ``petlab-server --local-workers 2`` process (iris, n = 6, the fast family): a zero-window and
a non-reading health watcher (raw HTTP/2, ``petlab.experiments.liveness_peers``) and two watchers
that leave at random are open while both Dask worker processes are SIGKILLed, again and again for
about two seconds, then left to restart. Health follows the cluster (NOT_SERVING with no worker,
SERVING again once the nannies have restarted them: each flip is ``HealthControl``'s, the path that
froze health ``Check`` with grpc's own servicer); health ``Check`` and ``ListModels`` answer within
their deadline throughout; SIGTERM ends the process within ``--grace`` + 5 s.
"""

from __future__ import annotations

import os
import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from petlab.experiments.liveness_peers import PROBE_SECONDS, attack, liveness_server
from petlab.server.common.health import NOT_SERVING, SERVING

psutil = pytest.importorskip("psutil")  # installed with distributed (the cluster extra)
pytest.importorskip("distributed")

pytestmark = pytest.mark.slow  # a circuit is compiled, and the workers load it

GRACE = 2.0
CLUSTER_MODEL = ("--model", "iris", "--n", "6", "--k", "3", "--algorithm", "fast", "--local-workers", "2")
KILL_ROUNDS = 8  # attack() steps that SIGKILL every worker, about 0.25 s apart
STEPS = 28  # attack() steps in all: the remaining ones leave the nannies time to restart the workers
RESTART_SECONDS = 60.0  # for the workers to come back and health to say SERVING


def worker_pids(server_pid: int) -> list[int]:
    """The Dask worker processes of the server: its children started by multiprocessing's spawn
    (the nannies run inside the server; the resource tracker is not a worker)."""
    pids = []
    for child in psutil.Process(server_pid).children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                pids.append(child.pid)
        except psutil.Error:  # gone meanwhile
            continue
    return pids


def test_hostile_watchers_while_cluster_workers_are_killed_then_sigterm_stops_the_process(tmp_path):
    server = liveness_server(tmp_path / "server", grace=GRACE, arguments=CLUSTER_MODEL)
    try:
        assert len(worker_pids(server.pid)) == 2
        killed: list[int] = []
        step = iter(range(STEPS))

        def kill_workers() -> None:
            if next(step) < KILL_ROUNDS:
                for pid in worker_pids(server.pid):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

        result = attack(server.address, kill_workers, flips=STEPS, flip_seconds=0.25, seed=29)
        assert len(killed) >= 2
        assert not result.hung, result.failures  # Check and ListModels answered within 5 s throughout
        assert NOT_SERVING in result.statuses, "health never said NOT_SERVING with the workers gone"
        restarted = time.monotonic() + RESTART_SECONDS
        while result.statuses[-1] != SERVING and time.monotonic() < restarted:
            time.sleep(0.5)
            result.statuses.append(check_status(server.address))
        assert result.statuses[-1] == SERVING, "health did not come back with the restarted workers"
        exited = server.terminate(GRACE + 5.0)
        assert exited is not None, f"still running {GRACE + 5} s after SIGTERM"
    finally:
        server.kill()


def check_status(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(), timeout=PROBE_SECONDS).status
