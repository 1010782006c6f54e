"""Every domain error names the gRPC status it is answered with, and the server's one interceptor
answers it so; anything else, and a domain error whose status is INTERNAL, is INTERNAL with a
message that names nothing (``server.common.boundary``, ``server.common.rpc_errors``)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import grpc
import pytest

import petlab.server.knn.service as knn_service
from petlab.client.knn_client import make_channel
from petlab.crypto.chain.instructions import InvalidInstruction
from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.knn.wire_format import ForeignBytes
from petlab.crypto.paillier_knn import BadPaillierInput
from petlab.errors import PetlabError
from petlab.protos import knn_pb2, knn_pb2_grpc
from petlab.server.common.boundary import INTERNAL_MESSAGE, answer
from petlab.server.common.rpc_errors import RETRY_AFTER_SECONDS, CallRefused, refuse_busy
from petlab.server.controller.audit_clock import AuditOverrun
from petlab.server.knn.evaluators import (
    ClusterUnavailable,
    EvaluationRejected,
    EvaluationTimedOut,
    KeysUnusable,
)
from petlab.server.knn.key_store import (
    KeyForAnotherModel,
    KeyNotFound,
    KeyTooLarge,
    MalformedKeyId,
    OwnerQuotaExceeded,
    UploadMismatch,
)

#: The statuses the servicers chose by hand for these errors before the errors named them.
EXPECTED = {
    KeyNotFound: grpc.StatusCode.NOT_FOUND,
    MalformedKeyId: grpc.StatusCode.INVALID_ARGUMENT,
    KeyForAnotherModel: grpc.StatusCode.FAILED_PRECONDITION,
    KeyTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    OwnerQuotaExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    UploadMismatch: grpc.StatusCode.INVALID_ARGUMENT,
    EvaluationRejected: grpc.StatusCode.INVALID_ARGUMENT,
    KeysUnusable: grpc.StatusCode.INVALID_ARGUMENT,
    EvaluationTimedOut: grpc.StatusCode.DEADLINE_EXCEEDED,
    ClusterUnavailable: grpc.StatusCode.UNAVAILABLE,
    ForeignBytes: grpc.StatusCode.INVALID_ARGUMENT,
    BadPaillierInput: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidInstruction: grpc.StatusCode.INVALID_ARGUMENT,
    AuditOverrun: grpc.StatusCode.UNAVAILABLE,
}


def _every_subclass(kind: type) -> Iterator[type]:
    for sub in kind.__subclasses__():
        yield sub
        yield from _every_subclass(sub)


def _import_rooms() -> None:
    """Every module of the server, the cryptography and the client, so that every error class is
    defined."""
    for name in ("petlab.server", "petlab.crypto", "petlab.client"):
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            importlib.import_module(module.name)


def test_every_domain_error_names_a_status_and_is_answered_with_it():
    _import_rooms()
    classes = set(_every_subclass(PetlabError))
    assert set(EXPECTED) <= classes and len(classes) > len(EXPECTED)
    for kind in classes:
        status = grpc.StatusCode[kind.grpc_status]  # KeyError: not a status
        assert status not in (grpc.StatusCode.OK, grpc.StatusCode.UNKNOWN), kind
    for kind, status in EXPECTED.items():
        assert grpc.StatusCode[kind.grpc_status] is status, kind
        assert answer(kind("a sentence for the caller")) == (status, "a sentence for the caller", ())


def test_refusals_carry_their_retry_hint_and_anything_else_is_internal_without_detail():
    with pytest.raises(CallRefused) as busy:
        refuse_busy("the server is busy")
    hint = (("retry-after-s", str(RETRY_AFTER_SECONDS)),)
    assert answer(busy.value) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "the server is busy", hint)
    for unexpected in (ValueError("cell count 3"), KeyError("age=41"), PetlabError("leverage 0.97")):
        assert answer(unexpected) == (grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE, ())
    assert answer(TimeoutError())[0] is grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.parametrize(
    ("raised", "status", "details"),
    [
        (ValueError("the training point 41"), grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE),
        (PetlabError("the training point 41"), grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE),
        (KeyNotFound("unknown key"), grpc.StatusCode.NOT_FOUND, "unknown key"),
    ],
)
def test_a_servicer_raises_and_the_interceptor_answers(
    serve, hosted_model, tmp_path, monkeypatch, raised, status, details
):
    """Through a server on loopback: what ``ListModels`` raises reaches the caller as its status,
    an unexpected exception as INTERNAL whose message names none of its figures."""

    def failing(self):
        raise raised

    hosted = {"iris": hosted_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))}
    monkeypatch.setattr(knn_service.HostedModel, "info", failing)
    with (
        serve(tmp_path, hosted) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
        pytest.raises(grpc.RpcError) as failed,
    ):
        knn_pb2_grpc.KnnServiceStub(channel).ListModels(knn_pb2.ListModelsRequest(), timeout=10)
    assert (failed.value.code(), failed.value.details()) == (status, details)
