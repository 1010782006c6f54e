"""How a call ends with a status: servicers raise, one interceptor answers.

Servicer code (on the event loop or in a worker thread) never calls ``context.abort`` itself: it
raises :class:`CallRefused` (through :func:`abort` or :func:`refuse_busy`), and the server's
:class:`~petlab.server.common.boundary.CallBoundary` interceptor ends the call with its status,
message and trailing metadata. So the same code runs in a thread (where an asyncio context cannot
be touched) and on the loop, and one place maps failures to statuses. :func:`model_named` is the
one lookup of a requested model every servicer uses: an unnamed model is INVALID_ARGUMENT and an
unknown one NOT_FOUND, with the same words everywhere (model names are public: ``ListModels``
returns them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import grpc

from petlab.errors import PetlabError

Model = TypeVar("Model")
RETRY_AFTER_SECONDS = 5


class CallRefused(PetlabError):
    """End the call with ``code`` and ``message`` (a sentence for a person that names no
    confidential figure), and ``trailing`` metadata."""

    def __init__(self, code: grpc.StatusCode, message: str, trailing: Sequence[tuple[str, str]] = ()):
        super().__init__(message)
        self.code, self.message, self.trailing = code, message, tuple(trailing)


def abort(context: Any, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with ``code`` and ``message`` (raises :class:`CallRefused`; ``context`` is
    accepted for the call sites' symmetry and not used)."""
    raise CallRefused(code, message)


def refuse_busy(message: str) -> NoReturn:
    """End the call RESOURCE_EXHAUSTED with a ``retry-after-s`` hint (every admission limit's
    answer), which the clients follow."""
    raise CallRefused(
        grpc.StatusCode.RESOURCE_EXHAUSTED, message, (("retry-after-s", str(RETRY_AFTER_SECONDS)),)
    )


def model_named(models: Mapping[str, Model], name: str, context: Any = None) -> Model:
    """The hosted model called ``name``, or the call ends (INVALID_ARGUMENT / NOT_FOUND)."""
    if not name:
        abort(context, grpc.StatusCode.INVALID_ARGUMENT, "the request does not name a model")
    if name not in models:
        hosted = ", ".join(sorted(models)) or "no models"
        abort(context, grpc.StatusCode.NOT_FOUND, f"no model named {name!r}; this server hosts {hosted}")
    return models[name]
