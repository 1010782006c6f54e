"""``petlab-experiments``: the demos, the benchmarks and the whole harness (``all``).

Each subcommand is a row of :data:`EXPERIMENTS`; its module defines ``add_arguments`` and ``run``
(``petlab.subcommands``). A new experiment is a new module and one row.
"""

from __future__ import annotations

import logging
import sys
from typing import NoReturn

from petlab.exit_status import run_program
from petlab.subcommands import Subcommand, run

EXPERIMENTS = (
    Subcommand("demo", "server and client processes: both protocols on Iris", "petlab.experiments.grpc_demo"),
    Subcommand(
        "local-demo", "encrypted k-NN on held-out Iris rows, in process", "petlab.experiments.local_demo"
    ),
    Subcommand(
        "knn-bench",
        "encrypted k-NN cost figures against n, per family, CSV + Markdown",
        "petlab.experiments.knn_bench",
    ),
    Subcommand(
        "knn-accuracy",
        "encrypted families vs float k-NN accuracy on the four data sets",
        "petlab.experiments.knn_accuracy",
    ),
    Subcommand(
        "knn-budget",
        "encrypted k-NN per error budget: concrete's cost, simulated agreement and accuracy",
        "petlab.experiments.knn_budget",
    ),
    Subcommand(
        "knn-figures",
        "encrypted k-NN plots from the committed tables: PBS against n, latency against PBS",
        "petlab.experiments.knn_figures",
    ),
    Subcommand(
        "onthemap-bench",
        "OnTheMap release at state scale: time and memory",
        "petlab.experiments.onthemap_bench",
    ),
    Subcommand(
        "onthemap-figures",
        "ICDE 2008 Figures 1-4 (200 and 100 miles) and prior mass per destination",
        "petlab.experiments.onthemap_figures",
    ),
    Subcommand(
        "adaptive-counts",
        "adaptive synthesis: synthetic against real point counts, by eps",
        "petlab.experiments.adaptive_counts",
    ),
    Subcommand(
        "plausible-tables",
        "plausible deniability at 100k records: the paper's Tables 3 and 5 beside ours",
        "petlab.experiments.plausible_tables",
    ),
    Subcommand(
        "cluster-bench",
        "k-NN and OnTheMap in process vs on a LocalCluster (1, 2 workers), with the extrapolation",
        "petlab.experiments.cluster_bench",
    ),
    Subcommand(
        "split-bench",
        "one k-NN query over many workers: whole circuit vs split on a LocalCluster, cost model",
        "petlab.experiments.split_bench",
    ),
    Subcommand(
        "plausible-bench",
        "plausible-deniability synthesis: 100k candidates, records/s and pass rate",
        "petlab.experiments.plausible_bench",
    ),
    Subcommand(
        "audit-bench",
        "the controller's exact audit: time and memory of a decision vs released sets, 5k and 100k records",
        "petlab.experiments.audit_bench",
    ),
    Subcommand(
        "server-design",
        "the server beside idle streams (and a baseline build): memory, threads, cheap calls, classify, stop",
        "petlab.experiments.server_design",
    ),
    Subcommand(
        "liveness-stress",
        "hostile health watchers against fresh petlab-server processes, N times: hangs and failures",
        "petlab.experiments.liveness_stress",
    ),
    Subcommand(
        "controller-caution",
        "the controller on a benign workload (ACRO's examples, client/examples): share released vs acro",
        "petlab.experiments.controller_caution",
    ),
    Subcommand(
        "links",
        "a device's wait over emulated links (mobile, home, data centre): first and later queries, model",
        "petlab.experiments.links",
    ),
    Subcommand(
        "all",
        "every experiment: k-NN over gRPC, sweeps, synthesis utility; CSV, Markdown, PNG",
        "petlab.experiments.run_all",
    ),
)


DESCRIPTION = "The demos, the benchmarks and the whole harness."


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    return run("petlab-experiments", DESCRIPTION, EXPERIMENTS, argv)


def program() -> NoReturn:
    """The console script: :func:`main`, its exit status kept after concrete's runtime has run
    (``petlab.exit_status``)."""
    run_program(main)


if __name__ == "__main__":
    program()
