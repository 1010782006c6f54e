"""Repeat the hostile-watcher attack of ``tests/test_liveness.py`` against fresh ``petlab-server``
processes and print the number of hangs (issue 29). Not part of ``make test``:

    python -m petlab.experiments.liveness_stress --repeats 200 --work /tmp/liveness

A repetition hangs when a health ``Check`` or ``ListModels`` misses its deadline during the attack
or the process is still running ``--grace`` + 5 s after SIGTERM.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from petlab.experiments.liveness_peers import ServerProcess, attack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="attacks, each on a fresh server")
    parser.add_argument("--flips", type=int, default=60, help="health flips per attack")
    parser.add_argument("--grace", type=float, default=2.0, help="the server's --grace")
    parser.add_argument("--work", type=Path, default=None, help="directory for the servers' data and logs")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="petlab-liveness-"))
    hangs = 0
    for repeat in range(args.repeats):
        server = ServerProcess(work / f"run-{repeat}", grace=args.grace)
        try:
            result = attack(server.address, server.flip, flips=args.flips, seed=repeat)
            exited = server.terminate(margin=5.0)
        finally:
            server.kill()
        hung = result.hung or exited is None
        hangs += hung
        exit_text = "NONE" if exited is None else f"{exited:.1f} s"
        hang_text = " HANG " + "; ".join(result.failures) if hung else ""
        print(
            f"run {repeat}: slowest Check {result.slowest_check:.2f} s, "
            f"ListModels {result.slowest_list:.2f} s, {result.dropped} hostile watchers dropped, "
            f"exit after SIGTERM {exit_text}{hang_text}",
            flush=True,
        )
    print(f"hangs: {hangs} of {args.repeats}")
    return 1 if hangs else 0


if __name__ == "__main__":
    raise SystemExit(main())
