"""A clock on the audit's work: the lock every person waits on is held for a bounded time.

The audits' memory is capped from public figures (``release_history``'s public caps), but their
work is not capped: a cap on the exact audit's work would refuse on how the records split, a figure
of the records. On a slow or loaded machine, or when the small-group search meets a structured
space, a decision can take seconds. :func:`audit_budget` sets a deadline for the calling thread;
the loops of the audit (``modular``'s eliminations and products, the small-group search, the
audits' blocks) call
:func:`tick`, which raises :class:`AuditOverrun` once the deadline has passed. The controller then
answers UNAVAILABLE with a retry hint, releases the lock and records nothing (``service``): no
refusal, nothing counted against the person, but an observation whose timing depends on the records
(docs/explanation/controller-audit.md lists it beside the answers' times). The lock is so held for
at most the budget plus one block of work (a product of at most 2,048 columns, a panel of 64 pivots,
one search node or 4,096 enumerated sets).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from petlab.errors import Unavailable

_state = threading.local()


class AuditOverrun(Unavailable):
    """The audit passed its deadline: nothing is decided (the step is answered UNAVAILABLE)."""


@contextmanager
def audit_budget(seconds: float) -> Iterator[None]:
    """Within the block, :func:`tick` raises :class:`AuditOverrun` after ``seconds`` (in this thread)."""
    earlier = getattr(_state, "deadline", None)
    _state.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _state.deadline = earlier


def tick() -> None:
    """Raise :class:`AuditOverrun` if this thread's audit deadline has passed."""
    deadline = getattr(_state, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise AuditOverrun("the audit passed its time budget")
