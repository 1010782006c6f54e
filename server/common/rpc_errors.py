"""The servicers' shared answers for a failed call: a typed ``abort`` and the model lookup.

``grpc.ServicerContext.abort`` raises and never returns; :func:`abort` says so to the type checker.
:func:`model_named` is the one lookup of a requested model that every servicer uses, so an unnamed
model is INVALID_ARGUMENT and an unknown one NOT_FOUND, with the same words everywhere. Model names
are public (``ListModels`` returns them), so the message may list them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn, TypeVar

import grpc

Model = TypeVar("Model")


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with ``code`` and ``message`` (``context.abort`` raises)."""
    context.abort(code, message)
    raise AssertionError("grpc.ServicerContext.abort returned")  # pragma: no cover


def model_named(models: Mapping[str, Model], name: str, context: grpc.ServicerContext) -> Model:
    """The hosted model called ``name``, or the call ends (INVALID_ARGUMENT / NOT_FOUND)."""
    if not name:
        abort(context, grpc.StatusCode.INVALID_ARGUMENT, "the request does not name a model")
    if name not in models:
        hosted = ", ".join(sorted(models)) or "no models"
        abort(context, grpc.StatusCode.NOT_FOUND, f"no model named {name!r}; this server hosts {hosted}")
    return models[name]
