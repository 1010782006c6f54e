"""``petlab-server persons``: the data owner's view of the persons who analyse, and the lift of a
suspension (``people``).

    petlab-server persons list [--data-dir DIR]            (also: petlab-server persons)
    petlab-server persons lift PERSON [--data-dir DIR] [--note TEXT]
    petlab-server persons suspend PERSON [--data-dir DIR] [--note TEXT]

It works on the controller's database (``sessions.sqlite`` in the data directory) while the server
runs: the server reads a person's record before every analysis, so a lift or a suspension takes
effect at the person's next call. Lifting also clears the person's refusal count (the budget starts
again); a suspended person's open session closes at its next step.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from petlab.errors import BadInput
from petlab.server.common.environment import add_env_option
from petlab.server.controller.session_store import SessionStore

DATABASE = "sessions.sqlite"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_option(parser, "--data-dir", Path, Path("petlab-data"), "the server's data directory")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=False)
    for name, text in (
        ("list", "list the persons with a refusal or a suspension (the default action)"),
        ("lift", "lift a person's suspension and clear their refusal count"),
        ("suspend", "suspend a person: no analysis until lifted"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        # also after the action; SUPPRESS keeps a value given before it (or the default above)
        action.add_argument(
            "--data-dir",
            type=Path,
            default=argparse.SUPPRESS,
            help="the server's data directory (also accepted here)",
        )
        if name != "list":
            action.add_argument("person", help="the person's name, as certified")
            action.add_argument("--note", default="", help="why (kept with the person's record)")


def run(args: argparse.Namespace) -> int:
    database = args.data_dir / DATABASE
    if not database.is_file():
        raise BadInput(f"no controller database at {database} (check --data-dir)")
    store = SessionStore(database)
    try:
        if args.action in (None, "list"):  # `petlab-server persons` alone lists
            rows = store.persons()
            if not rows:
                print("no person has a refusal or a suspension")
            for state, note in rows:
                last = (
                    time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(state.last_refusal))
                    if state.last_refusal
                    else "-"
                )
                status = "suspended" if state.suspended else "active"
                print(
                    f"{state.person}\t{status}\trefusals {state.refusals}\tlast refusal {last}\t"
                    f"analyses in 24 h {state.analyses_last_day}\t{note}"
                )
            return 0
        suspended = args.action == "suspend"
        note = args.note or ("suspended by the data owner" if suspended else "lifted by the data owner")
        state = store.set_suspended(args.person, suspended, note)
        print(f"{state.person}: {'suspended' if state.suspended else 'active, refusals cleared'}")
        return 0
    finally:
        store.close()
