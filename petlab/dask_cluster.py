"""Where distributed work runs: a Dask scheduler's address, or an embedded ``LocalCluster``.

Both ``petlab-server serve`` and ``petlab-synth onthemap`` take ``--cluster ADDRESS`` (a running
``dask scheduler``) or ``--local-workers N`` (N worker processes with one thread each, started
here and stopped with the client). Without either, nothing here runs and Dask is never imported:
``distributed`` is imported only inside :meth:`DaskCluster.start`, and it is an optional
dependency (``pip install 'petlab[cluster]'``).

The embedded ``LocalCluster`` listens on the loopback interface only: its scheduler, workers and
dashboard (which shows task names, worker logs and memory, when bokeh is installed) are reachable
from this machine only. Its connections are mutual TLS under a key pair made for it in memory
(``Security.temporary()``; :attr:`DaskCluster.security`): Dask runs whatever pickled function a
client submits, and without this any local user could connect to the scheduler's loopback port and
run code as the data owner, next to its training points, keys and confidential data
(``tests/server/knn/test_cluster_knn.py``). A scheduler given by ``--cluster`` is secured by its
operator (``tls://`` and Dask's ``distributed.comm.tls`` configuration, which the client reads).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

LOCAL_HOST = "127.0.0.1"  # where an embedded LocalCluster listens, dashboard included

if TYPE_CHECKING:
    from distributed import Client


@dataclass(frozen=True)
class ClusterSpec:
    """``address`` of a Dask scheduler, or ``local_workers`` > 0 for an embedded cluster."""

    address: str | None = None
    local_workers: int = 0

    def __post_init__(self) -> None:
        if self.address and self.local_workers:
            raise ValueError("give a scheduler address or a number of local workers, not both")
        if self.local_workers < 0:
            raise ValueError("the number of local workers cannot be negative")

    @property
    def enabled(self) -> bool:
        return bool(self.address) or self.local_workers > 0

    def describe(self) -> str:
        if self.address:
            return f"Dask scheduler {self.address}"
        return f"local Dask cluster of {self.local_workers} worker process(es)"


def add_cluster_arguments(parser: argparse._ActionsContainer, env_prefix: str = "PETLAB_") -> None:
    """``--cluster ADDRESS`` and ``--local-workers N`` (exclusive), defaults from the environment
    (``PETLAB_CLUSTER``, ``PETLAB_LOCAL_WORKERS``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--cluster",
        metavar="ADDRESS",
        default=os.environ.get(f"{env_prefix}CLUSTER") or None,
        help=f"run on the Dask scheduler at ADDRESS (tcp://host:8786, tls://...) [env {env_prefix}CLUSTER]",
    )
    group.add_argument(
        "--local-workers",
        type=int,
        metavar="N",
        default=int(os.environ.get(f"{env_prefix}LOCAL_WORKERS") or 0),
        help=f"start a local Dask cluster of N worker processes [env {env_prefix}LOCAL_WORKERS]",
    )


def spec_from_args(args: argparse.Namespace) -> ClusterSpec:
    if args.cluster and args.local_workers:  # one from the environment, one from the command line
        raise ValueError("give --cluster or --local-workers, not both")
    return ClusterSpec(address=args.cluster, local_workers=args.local_workers)


def worker_environment(workers_on_this_machine: int) -> dict[str, str]:
    """Dask starts workers with ``OMP_NUM_THREADS=1`` (for numpy); an FHE evaluation uses several
    cores through it, so each of N local workers gets its share of the machine's cores."""
    share = max(1, (os.cpu_count() or 1) // max(workers_on_this_machine, 1))
    return {"OMP_NUM_THREADS": str(share)}


class DaskCluster:
    """A connected ``distributed.Client`` (and the ``LocalCluster`` it owns, if any)."""

    def __init__(self, client: Client, local: Any = None):
        self.client, self._local = client, local

    @property
    def security(self) -> Any:
        """The embedded cluster's ``distributed.Security`` (its in-memory TLS key pair), or None."""
        return None if self._local is None else self._local.security

    @classmethod
    def start(cls, spec: ClusterSpec, timeout: float = 30.0) -> DaskCluster:
        """Connect to ``spec.address`` or start ``spec.local_workers`` worker processes.
        ``RuntimeError`` if Dask is not installed or the scheduler cannot be reached."""
        if not spec.enabled:
            raise ValueError("no cluster configured")
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:
            raise RuntimeError(
                "the cluster options need Dask: pip install 'petlab[cluster]' (dask[dataframe], distributed)"
            ) from exc
        if spec.address:
            try:
                return cls(Client(spec.address, timeout=timeout, set_as_default=False))
            except OSError as exc:
                raise RuntimeError(f"cannot reach the Dask scheduler at {spec.address}: {exc}") from exc
        local = LocalCluster(
            n_workers=spec.local_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=f"{LOCAL_HOST}:0",  # ":0" would be every interface
            host=LOCAL_HOST,
            env=worker_environment(spec.local_workers),
            security=True,  # mutual TLS under a temporary key pair: no other local user gets in
        )
        return cls(Client(local, security=local.security, set_as_default=False), local)

    def worker_count(self) -> int:
        """Workers the scheduler knows now (0 when it has none, or cannot be asked)."""
        try:
            return len(self.client.scheduler_info(n_workers=-1)["workers"])
        except Exception:  # a lost scheduler connection: as good as no workers
            return 0

    def close(self) -> None:
        self.client.close()
        if self._local is not None:
            self._local.close()

    def __enter__(self) -> DaskCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
