"""How a call ends with a status: servicers raise, one interceptor answers.

Servicer code (on the event loop or in a worker thread) never chooses a status itself: it raises a
domain error (a :class:`~petlab.errors.PetlabError`), and each class names the status it stands
for (``grpc_status``): the store's ``KeyNotFound`` is NOT_FOUND, a request that breaks the
protocol is :class:`InvalidRequest`, and so on. The server's
:class:`~petlab.server.common.boundary.CallBoundary` interceptor ends the call with that status,
the error's message and, for :func:`refuse_busy`, a retry hint in the trailing metadata. So the
same code runs in a thread (where an asyncio context cannot be touched) and on the loop, and one
place turns failures into statuses. :func:`model_named` is the one lookup of a requested model
every servicer uses: an unnamed model is INVALID_ARGUMENT and an unknown one NOT_FOUND, with the
same words everywhere (model names are public: ``ListModels`` returns them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NoReturn, TypeVar

import grpc

from petlab.errors import BadInput, PetlabError, Refused, Unavailable

Model = TypeVar("Model")
RETRY_AFTER_SECONDS = 5


class CallRefused(PetlabError):
    """End the call with ``code`` and ``message`` (a sentence for a person that names no
    confidential figure), and ``trailing`` metadata: for a status the raising code chooses at run
    time (``ThreadContext.abort``, the admission limits)."""

    def __init__(self, code: grpc.StatusCode, message: str, trailing: Sequence[tuple[str, str]] = ()):
        super().__init__(message)
        self.code, self.message, self.trailing = code, message, tuple(trailing)
        self.grpc_status = code.name


class InvalidRequest(BadInput):
    """The request breaks the method's rules (a field missing, too large, out of order)."""


class NotFound(BadInput):
    """The request names something this server does not have."""

    grpc_status = "NOT_FOUND"


class Unauthenticated(Refused):
    """The call does not say, or does not prove, who makes it."""

    grpc_status = "UNAUTHENTICATED"


class PermissionDenied(Refused):
    """The caller is known and may not do this."""

    grpc_status = "PERMISSION_DENIED"


class PreconditionFailed(Refused):
    """The request is well formed, and the state it needs is not there (yet)."""


class AlreadyExists(Refused):
    """What the request would create exists already."""

    grpc_status = "ALREADY_EXISTS"


class ResourceExhausted(Refused):
    """A cap or a quota leaves no room for the request."""

    grpc_status = "RESOURCE_EXHAUSTED"


class CallCancelled(Refused):
    """The call ended (its caller gave up, its deadline passed) before its work began."""

    grpc_status = "CANCELLED"


class TimedOut(Unavailable):
    """The call, or a part of it its peer had to send, did not finish within its time."""

    grpc_status = "DEADLINE_EXCEEDED"


def status_of(error: BaseException) -> grpc.StatusCode:
    """The status a call ended by ``error`` gets: its class's for a :class:`PetlabError`, else
    INTERNAL (a bug, whose message is never sent)."""
    if isinstance(error, PetlabError):
        return grpc.StatusCode[error.grpc_status]
    return grpc.StatusCode.INTERNAL


def refuse_busy(message: str) -> NoReturn:
    """End the call RESOURCE_EXHAUSTED with a ``retry-after-s`` hint (every admission limit's
    answer), which the clients follow."""
    raise CallRefused(
        grpc.StatusCode.RESOURCE_EXHAUSTED, message, (("retry-after-s", str(RETRY_AFTER_SECONDS)),)
    )


def model_named(models: Mapping[str, Model], name: str) -> Model:
    """The hosted model called ``name``, or the call ends (INVALID_ARGUMENT / NOT_FOUND)."""
    if not name:
        raise InvalidRequest("the request does not name a model")
    if name not in models:
        hosted = ", ".join(sorted(models)) or "no models"
        raise NotFound(f"no model named {name!r}; this server hosts {hosted}")
    return models[name]
