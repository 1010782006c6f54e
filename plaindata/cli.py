"""``petlab-synth``: plain-data release tools.

petlab-synth commute-data --workers 100000 --seed 1 --out commute/
petlab-synth onthemap --od commute/od_main_JT00.csv.gz --xwalk commute/xwalk.csv.gz \
    --eps 4.6 --delta 1e-5 --out synthetic.csv.gz
petlab-synth onthemap --od ... --xwalk ... --local-workers 2 --out synthetic-parts/   # or --cluster ADDRESS
petlab-synth adaptive --od commute/od_main_JT00.csv.gz --xwalk commute/xwalk.csv.gz \
    --method improved --eps 1 --out adaptive.csv.gz
petlab-synth plausible --data acs13.csv --k 50 --gamma 4 --omega 9 --eps0 1 --runs 1000 \
    --out synthetic.csv

Each subcommand is a row of :data:`COMMANDS` (``petlab.subcommands``), its module in
``petlab.plaindata.commands``: a new synthesizer is a module and one row.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from petlab.exit_status import run_program
from petlab.subcommands import Subcommand, run

COMMANDS = (
    Subcommand(
        "commute-data", "write seeded LODES-style commute data", "petlab.plaindata.commands.commute_data"
    ),
    Subcommand(
        "onthemap",
        "OnTheMap PDP synthesizer (ICDE 2008 Algorithms 1-2)",
        "petlab.plaindata.commands.onthemap",
    ),
    Subcommand(
        "adaptive",
        "adaptive histograms / direct synthesis on O/D pairs",
        "petlab.plaindata.commands.adaptive",
    ),
    Subcommand(
        "plausible",
        "plausible-deniability synthesis of person records (VLDB 2017)",
        "petlab.plaindata.commands.plausible",
    ),
)


DESCRIPTION = __doc__.split("\n\nEach subcommand")[0]  # the examples, without the developer's note


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run("petlab-synth", DESCRIPTION, COMMANDS, argv)


def program() -> NoReturn:
    """The console script: :func:`main`, its exit status kept after concrete's runtime has run
    (``petlab.exit_status``)."""
    run_program(main)


if __name__ == "__main__":
    program()
