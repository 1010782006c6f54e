"""``petlab-server``'s flags with defaults from the environment: ``--port`` defaults to
``$PETLAB_PORT``, and so on; each flag's help names its variable. A variable that does not parse
as its flag's type stops the program with a sentence naming the variable."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any


def env(name: str, default):
    """``$PETLAB_<name>``, or ``default`` when unset."""
    return os.environ.get(f"PETLAB_{name}", default)


def env_flag(name: str) -> bool:
    """A yes/no environment variable: 1/true/yes or 0/false/no (any case), unset or empty is no."""
    value = str(env(name, "")).strip().lower()
    if value not in ("", "0", "1", "false", "true", "no", "yes"):
        raise SystemExit(f"petlab-server: PETLAB_{name} must be 1/0, true/false or yes/no, not {value!r}")
    return value in ("1", "true", "yes")


def _variable(flag: str, variable: str | None) -> str:
    return variable or flag.lstrip("-").upper().replace("-", "_")


def add_env_option(
    parser: argparse.ArgumentParser,
    flag: str,
    kind: Callable[[str], Any],
    default: Any,
    help: str,
    variable: str | None = None,
) -> None:
    """``flag`` taking one ``kind`` value, default ``$PETLAB_<VARIABLE>`` (from the flag's name
    unless given), else ``default``."""
    name = _variable(flag, variable)
    raw = env(name, None)
    try:
        value = default if raw is None else kind(raw)
    except ValueError:
        raise SystemExit(f"petlab-server: PETLAB_{name}={raw!r} is not a valid {flag} value") from None
    parser.add_argument(flag, type=kind, default=value, help=f"[PETLAB_{name}] {help}")


def add_env_switch(
    parser: argparse.ArgumentParser, flag: str, help: str, variable: str | None = None
) -> None:
    """A yes/no ``flag``, on by default when ``$PETLAB_<VARIABLE>`` says yes."""
    name = _variable(flag, variable)
    parser.add_argument(flag, action="store_true", default=env_flag(name), help=f"[PETLAB_{name}=1] {help}")
