"""Progress on stderr that leaves nothing behind where stderr is not a terminal.

On a terminal, :func:`bar` is a ``tqdm`` bar (redrawn in place with carriage returns). Elsewhere (a
log file, a pipe, CI), a redrawn bar would leave its every frame in the output as fragments, so
:func:`bar` gives a :class:`StageLines` instead: no bar, a plain line when the step begins and one
each time the caller names a new stage (``set_postfix_str``), with the steps done so far.
:func:`say` writes a message line that does not break a bar on screen.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from tqdm import tqdm


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stderr by default) is a terminal."""
    stream = stream or sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class StageLines:
    """The part of ``tqdm``'s interface petlab uses, for output that is not a terminal: a line
    ``desc ...`` when it starts, then one line per stage named with :meth:`set_postfix_str`
    (``desc: stage (done/total steps done)``), nothing else."""

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        total: int | float | None = None,
        desc: str = "",
        disable: bool = False,
        **_: Any,
    ):
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable, self.total, self.desc, self.disable = iterable, total, desc, disable
        self.n: int | float = 0
        self._stage = ""
        if desc and not disable:  # the step has begun (no count: a bar's total can be a data figure)
            print(f"{desc} ...", file=sys.stderr, flush=True)

    def __iter__(self) -> Iterator[Any]:
        for item in () if self.iterable is None else self.iterable:
            yield item
            self.n += 1

    def update(self, n: int | float = 1) -> None:
        self.n += n

    def reset(self) -> None:
        """Start counting again (a step that is retried)."""
        self.n = 0

    def set_postfix_str(self, stage: str = "", refresh: bool = True) -> None:
        if stage == self._stage or self.disable:
            return
        self._stage = stage
        done = f" ({self.n:g}/{self.total:g} steps done)" if self.total else ""
        print(f"{self.desc}: {stage}{done}" if self.desc else f"{stage}{done}", file=sys.stderr, flush=True)

    def write(self, message: str) -> None:
        say(message)

    def close(self) -> None:
        pass

    def __enter__(self) -> StageLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bar(iterable: Iterable[Any] | None = None, *, disable: bool = False, **options: Any) -> Any:
    """A ``tqdm`` bar (``iterable`` and ``options`` as ``tqdm``'s) on a terminal;
    :class:`StageLines` elsewhere."""
    if is_terminal():
        return tqdm(iterable, disable=disable, **options)
    return StageLines(iterable, disable=disable, **options)


def say(message: str) -> None:
    """``message`` as a line on stderr, above a bar that is on screen."""
    if is_terminal():
        tqdm.write(message, file=sys.stderr)
    else:
        print(message, file=sys.stderr, flush=True)
