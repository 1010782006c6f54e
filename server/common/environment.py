"""``petlab-server``'s flags with defaults from the environment: ``--port`` defaults to
``$PETLAB_PORT``, and so on (``PETLAB_`` + the flag's name in upper case, dashes as underscores);
each flag's help names its variable. Older irregular names still work with a warning. A variable
that does not parse as its flag's type stops the program with a sentence naming the variable."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from petlab.errors import BadInput

#: Variables renamed to the rule (:func:`variable_of`): new name -> the old one, still read (when
#: the new one is unset) with a deprecation warning on stderr.
RENAMED = {"GRACE": "GRACE_SECONDS", "TOKENS": "TOKENS_FILE", "MODEL": "MODELS"}


def env(name: str, default):
    """``$PETLAB_<name>``, else its deprecated old name (:data:`RENAMED`, with a warning), else
    ``default``."""
    old = RENAMED.get(name)
    value = os.environ.get(f"PETLAB_{name}")
    if value is None and old is not None and f"PETLAB_{old}" in os.environ:
        print(
            f"petlab-server: warning: PETLAB_{old} is deprecated, use PETLAB_{name}",
            file=sys.stderr,
        )
        value = os.environ[f"PETLAB_{old}"]
    return default if value is None else value


def env_flag(name: str) -> bool:
    """A yes/no environment variable: 1/true/yes or 0/false/no (any case), unset or empty is no."""
    value = str(env(name, "")).strip().lower()
    if value not in ("", "0", "1", "false", "true", "no", "yes"):
        raise BadInput(f"PETLAB_{name} must be 1/0, true/false or yes/no, not {value!r}")
    return value in ("1", "true", "yes")


def variable_of(flag: str) -> str:
    """The rule for every program: ``PETLAB_`` + the flag's name in upper case, dashes as
    underscores (this returns the part after ``PETLAB_``)."""
    return flag.lstrip("-").upper().replace("-", "_")


def add_env_option(
    parser: argparse._ActionsContainer,
    flag: str,
    kind: Callable[[str], Any],
    default: Any,
    help: str,
) -> None:
    """``flag`` taking one ``kind`` value, default ``$PETLAB_<FLAG>`` (:func:`variable_of`; or its
    old name, :data:`RENAMED`), else ``default``."""
    name = variable_of(flag)
    raw = env(name, None)
    try:
        value = default if raw is None else kind(raw)
    except ValueError:
        raise BadInput(f"PETLAB_{name}={raw!r} is not a valid {flag} value") from None
    parser.add_argument(flag, type=kind, default=value, help=f"{help} [env PETLAB_{name}]")


def add_env_switch(parser: argparse._ActionsContainer, flag: str, help: str) -> None:
    """A yes/no ``flag``, on by default when ``$PETLAB_<FLAG>`` says yes."""
    name = variable_of(flag)
    parser.add_argument(
        flag, action="store_true", default=env_flag(name), help=f"{help} [env PETLAB_{name}=1]"
    )
