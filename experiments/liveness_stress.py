"""Repeat the hostile-watcher attack of ``tests/e2e/test_liveness.py`` against fresh ``petlab-server``
processes and print the number of hangs. Not part of ``make test``:

    petlab-experiments liveness-stress --runs 200
    python -m petlab.experiments.liveness_stress --runs 200

Each run starts a server, attacks it (``petlab.experiments.liveness_peers.attack``: a zero-window
and a non-reading health watcher, two watchers leaving at random, health flipped ``--flips`` times),
then sends SIGTERM. The next run's server starts while this one is attacked (a server's start,
about 5 s of imports, is most of a run's cost). A run *hangs* when the process is still running
``--grace`` + 5 s after SIGTERM, and *fails* when a health ``Check`` or ``ListModels`` missed its
deadline during the attack (or a peer thread did not stop); a hung server's threads (name, state,
kernel wait) are printed before it is killed. The last line gives runs, hangs, failures and the slowest exit.

With ``--floods``, each run then meets every flood of ``tests/e2e/test_floods.py`` at once
(``liveness_peers.floods``: rapid reset, ping floods, unread replies, 1,100 idle connections,
silent calls) for ``--flood-seconds`` before the SIGTERM, and a probe that missed its deadline
during them is a failure too.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from petlab.experiments.liveness_peers import attack, flip, floods, liveness_server
from petlab.experiments.server_process import ServerProcess

EXIT_MARGIN_SECONDS = 5.0  # a server not gone within --grace + this after SIGTERM hangs


@dataclass
class Tally:
    runs: int = 0
    hangs: int = 0
    failures: int = 0
    slowest_exit: float = 0.0

    def add(self, failed: bool, exited: float | None) -> None:
        self.runs += 1
        self.hangs += exited is None
        self.failures += failed
        if exited is not None:
            self.slowest_exit = max(self.slowest_exit, exited)

    def summary(self) -> str:
        return (
            f"runs: {self.runs}, hangs: {self.hangs}, failures: {self.failures}, "
            f"slowest exit after SIGTERM: {self.slowest_exit:.2f} s"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=200, help="attacks, each on a fresh server process")
    parser.add_argument("--flips", type=int, default=40, help="health flips (SIGUSR1) during each attack")
    parser.add_argument("--grace", type=float, default=2.0, help="the server's --grace, in seconds")
    parser.add_argument("--floods", action="store_true", help="also every flood at once in each run")
    parser.add_argument("--flood-seconds", type=float, default=6.0, help="how long the floods last")
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="directory for the servers' data and logs, kept (default: a temporary one, bad runs kept)",
    )


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.runs <= 100_000 or not 0 <= args.flips <= 10_000 or not 0 < args.grace <= 60:
        raise SystemExit("--runs must be 1-100000, --flips 0-10000, --grace in (0, 60]")
    work = args.work or Path(tempfile.mkdtemp(prefix="petlab-liveness-"))
    tally = Tally()
    starter = ThreadPoolExecutor(1, thread_name_prefix="next-server")

    def start(repeat: int) -> Future[ServerProcess]:
        return starter.submit(liveness_server, work / f"run-{repeat}", args.grace)

    upcoming: Future[ServerProcess] | None = start(0)
    try:
        for repeat in range(args.runs):
            assert upcoming is not None  # started for every run
            server = upcoming.result()
            upcoming = start(repeat + 1) if repeat + 1 < args.runs else None
            try:
                result = attack(server.address, flip(server), flips=args.flips, seed=repeat)
                if args.floods:
                    flooded = floods(server.address, args.flood_seconds)
                    result.failures += [f"during the floods: {failure}" for failure in flooded.failures]
                    result.calls += flooded.calls
                exited = server.terminate(args.grace + EXIT_MARGIN_SECONDS)
                stuck = server.threads() if exited is None else []
            finally:
                server.kill()
            tally.add(result.hung, exited)
            exit_text = "NONE (killed)" if exited is None else f"{exited:.2f} s"
            failed = " FAILED " + "; ".join(result.failures) if result.hung else ""
            print(
                f"run {repeat + 1}/{args.runs}: slowest Check {result.slowest_check:.2f} s, "
                f"ListModels {result.slowest_list:.2f} s, {result.calls} calls, "
                f"{result.dropped} hostile watchers dropped, exit after SIGTERM {exit_text}{failed}",
                flush=True,
            )
            if stuck:
                print(f"  threads of the hung server: {' | '.join(stuck)}", flush=True)
            if args.work is None and exited is not None and not result.hung:
                shutil.rmtree(server.log.parent, ignore_errors=True)  # keep only the logs of bad runs
    finally:
        if upcoming is not None:
            upcoming.result().kill()
        starter.shutdown()
        print(tally.summary(), flush=True)
    return 1 if tally.hangs or tally.failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
