"""gRPC servicer for encrypted k-NN: a thin layer over ``crypto.knn.deployment`` and the key store.

Every request field is validated before any work, and every failure is answered with a status and
a sentence for a person: unknown model -> NOT_FOUND; unknown or expired key id -> NOT_FOUND; a key
registered for another model -> FAILED_PRECONDITION; a ciphertext that does not deserialize or does
not fit the model -> INVALID_ARGUMENT; an upload over the cap -> RESOURCE_EXHAUSTED.

Nothing a client sent reaches concrete before ``crypto.knn.wire_format`` has checked it against
the model's client specs, since concrete kills the process on keys or ciphertexts that do not fit:
an upload must announce the model's key size (within :data:`KEY_SIZE_MARGIN`) and be a key set of
exactly the model's kinds, ids and parameters (else INVALID_ARGUMENT, and nothing is stored or
evicted); every query and warm-up query must have the model's input type and concrete's payload
layout; a stored key set is checked again the first time this process uses it (a store written
before these checks, or altered on disk). A key's last-used time moves only after an evaluation
that succeeded.

The servicer validates every request and holds the keys; an evaluator (``server.knn.evaluators``:
in this process, or on a Dask cluster) runs the evaluations and the warm-ups, and the servicer does
not know which.

Every call first names its owner (``server.common.callers``): with tokens or client certificates
configured, an unidentified call is UNAUTHENTICATED, a key id is found only for the owner who
registered it, and each owner's uploads and evaluations take a per-owner slot before a shared one.
Evaluation slots are shared fairly between callers, anonymous ones included
(``server.common.fair_share``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from concrete import fhe

from petlab.crypto.knn.deployment import (
    client_specs_bytes,
    parse_ciphertext,
    parse_evaluation_keys,
)
from petlab.crypto.knn.model import KnnModel
from petlab.crypto.knn.split.program import StageGraph
from petlab.crypto.knn.wire_format import ForeignBytes, WireFormat
from petlab.protos import knn_pb2, knn_pb2_grpc
from petlab.server.common.admission import OwnerSlots, ServiceLimits, Slots, UploadWatchdog
from petlab.server.common.call_log import logged_stream_in, logged_unary
from petlab.server.common.callers import CallerIdentities
from petlab.server.common.fair_share import FairSlots, caller_key
from petlab.server.common.rpc_errors import abort, model_named
from petlab.server.knn.evaluators import (
    KEY_CACHE_ENTRIES,
    ClusterUnavailable,
    Evaluation,
    EvaluationRejected,
    EvaluationTimedOut,
    Evaluator,
    KeysUnusable,
    warm_up,
)
from petlab.server.knn.key_store import (
    KeyForAnotherModel,
    KeyNotFound,
    KeyStore,
    KeyTooLarge,
    MalformedKeyId,
    UploadMismatch,
)
from petlab.server.knn.key_warmup import WarmupStore

log = logging.getLogger(__name__)

MAX_QUERY_BYTES = 1 << 20
MAX_BATCH = 64
# an upload is the key payloads the specs give plus Cap'n Proto framing (320 bytes measured for
# a bootstrap and a key-switching key); anything further off is not this model's key set
KEY_SIZE_MARGIN = 64 * 1024


@dataclass
class HostedModel:
    model: KnnModel
    server: fhe.Server
    dataset: str
    graph: StageGraph | None = None  # a split model's stage graph (crypto.knn.split); None: whole
    specs: bytes = b""
    specs_sha256: str = ""
    wire: WireFormat = field(init=False)

    def __post_init__(self) -> None:
        self.specs = client_specs_bytes(self.server)
        self.specs_sha256 = hashlib.sha256(self.specs).hexdigest()
        self.wire = WireFormat.from_specs(self.specs)
        if not self.wire.keys_checkable:
            raise ValueError(
                f"model {self.model.name}: its circuit uses packing key-switching keys, which this server "
                "cannot check before running them; refusing to host it"
            )

    @property
    def key_size_window(self) -> tuple[int, int]:
        """The sizes an upload of this model's evaluation keys may announce."""
        return self.wire.key_bytes, self.wire.key_bytes + KEY_SIZE_MARGIN

    def info(self) -> knn_pb2.ModelInfo:
        quantizer = self.model.quantizer
        return knn_pb2.ModelInfo(
            name=self.model.name,
            dataset=self.dataset,
            d=self.model.d,
            bits=quantizer.bits,
            class_names=self.model.class_names,
            feature_names=self.model.feature_names,
            feature_lows=quantizer.lows,
            feature_highs=quantizer.highs,
            algorithm=self.model.algorithm,
            global_p_error=self.model.global_p_error,
        )


class KnnServicer(knn_pb2_grpc.KnnServiceServicer):
    def __init__(
        self,
        models: dict[str, HostedModel],
        keys: KeyStore,
        evaluator: Evaluator,
        warmups: WarmupStore | None = None,
        limits: ServiceLimits | None = None,
        identities: CallerIdentities | None = None,
    ):
        self._models, self._keys, self._evaluator, self._warmups = models, keys, evaluator, warmups
        self._limits = limits or ServiceLimits()
        self._identities = identities or CallerIdentities()
        enforced = self._identities.enforced
        self._upload_slots = Slots(self._limits.upload_slots, "key uploads")
        self._evaluation_slots = FairSlots(  # the room's threads are evaluation slots too
            self._limits.evaluation_slots - self._limits.evaluation_waiting,
            "evaluations",
            self._limits.evaluation_waiting,
            self._limits.evaluation_wait_seconds,
        )
        self._owner_uploads = OwnerSlots(self._limits.owner_upload_slots, "key uploads", enforced)
        self._owner_evaluations = OwnerSlots(self._limits.owner_evaluation_slots, "evaluations", enforced)
        self._checked_keys: set[str] = set()  # stored key ids whose file this process has checked
        self._checked_lock = threading.Lock()

    def prepare_stored_keys(self) -> int:
        """At server start: prepare the most recently used stored keys that have a warm-up query
        (at most what an evaluator keeps in memory). Returns how many."""
        if self._warmups is None:
            return 0
        prepared = 0
        stored = sorted(self._keys.entries(), key=lambda k: k.last_used, reverse=True)
        by_tag = {key_tag(h): h for h in self._models.values()}  # keys made for these circuits only
        self._warmups.keep_only({key.key_id for key in stored})
        for key in stored:
            hosted, ciphertext = by_tag.get(key.model), self._warmups.get(key.key_id)
            if prepared >= KEY_CACHE_ENTRIES or hosted is None or ciphertext is None:
                continue
            path = self._keys.locate(key.key_id, key.model)
            try:
                self._check_stored(key.key_id, hosted, path)
                ciphertext = hosted.wire.check_input(ciphertext)
            except (ForeignBytes, OSError) as exc:
                log.warning("stored key %s not prepared (forgotten): %s", key.key_id, exc)
                self._forget(key.key_id)
                continue
            ready, problem = warm_up(
                self._evaluator, Evaluation(hosted.model.name, key.key_id, path, [ciphertext], 300.0)
            )
            if problem:  # a stale or damaged stored key is simply not prepared
                log.warning("stored key %s not prepared: %s", key.key_id, problem)
            prepared += ready
        return prepared

    # ------------------------------------------------------------------ RPCs

    @logged_unary
    def ListModels(self, request, context):
        self._identities.owner(context)
        return knn_pb2.ListModelsResponse(models=[m.info() for m in self._models.values()])

    @logged_unary
    def GetClientSpecs(self, request, context):
        self._identities.owner(context)
        hosted = self._model(request.model, context)
        return knn_pb2.GetClientSpecsResponse(
            model=hosted.info(), client_specs=hosted.specs, specs_sha256=hosted.specs_sha256
        )

    @logged_stream_in
    def RegisterKeys(self, request_iterator, context):
        owner = self._identities.owner(context)
        with (
            self._owner_uploads.held(owner, context),
            self._upload_slots.held(context),
            UploadWatchdog(context, self._limits) as watchdog,
        ):
            try:
                return self._register(request_iterator, context, watchdog, owner)
            except grpc.RpcError:  # the watchdog cancelled the call: nothing was stored
                reason = watchdog.reason or "the upload was cancelled"
                log.info("key upload from %s cancelled: %s", context.peer(), reason)
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, reason)

    def _register(
        self, request_iterator, context, watchdog: UploadWatchdog, owner: str
    ) -> knn_pb2.RegisterKeysResponse:
        first = next(request_iterator, None)
        watchdog.received(len(first.data) if first is not None else 0)
        if first is None:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, "the key upload was empty")
        hosted = self._model(first.model, context)
        if len(first.warmup_query) > MAX_QUERY_BYTES:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the warm-up query is too large")
        warmup = b""
        if first.warmup_query:  # checked before any byte is stored
            try:
                warmup = hosted.wire.check_input(first.warmup_query)
            except ForeignBytes as exc:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"the warm-up query does not fit: {exc}")

        def chunks():
            yield first.data
            for chunk in request_iterator:
                if chunk.model or chunk.total_size or chunk.sha256 or chunk.warmup_query:
                    raise UploadMismatch(
                        "only the first chunk may carry model, total_size, sha256 and warmup_query"
                    )
                watchdog.received(len(chunk.data))
                yield chunk.data
            watchdog.finish()  # every byte is in; verification is not the client's delay

        try:
            stored = self._keys.put(
                key_tag(hosted),
                owner,
                first.total_size,
                first.sha256,
                chunks(),
                verify=lambda path: _check_key_file(hosted, path),
                size_window=hosted.key_size_window,
            )
        except KeyTooLarge as exc:  # the store's cap or the owner's quota
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except UploadMismatch as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        with self._checked_lock:
            self._checked_keys.add(stored.key_id)
        if warmup:
            self._warm_up(stored.key_id, hosted, warmup, context, owner)
        return knn_pb2.RegisterKeysResponse(key_id=stored.key_id, size=stored.size)

    @logged_unary
    def Classify(self, request, context):
        owner = self._identities.owner(context)
        with (
            self._owner_evaluations.held(owner, context),
            self._evaluation_slots.held(self._fair_caller(owner, context), context),
        ):
            hosted = self._model(request.model, context)
            (answer,) = self._evaluate(hosted, request.key_id, [request.encrypted_query], context, owner)
            return knn_pb2.ClassifyResponse(encrypted_class=answer)

    @logged_unary
    def ClassifyBatch(self, request, context):
        owner = self._identities.owner(context)
        with (
            self._owner_evaluations.held(owner, context),
            self._evaluation_slots.held(self._fair_caller(owner, context), context),
        ):
            hosted = self._model(request.model, context)
            if not request.encrypted_queries:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the batch holds no queries")
            if len(request.encrypted_queries) > MAX_BATCH:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"a batch holds at most {MAX_BATCH} queries, got {len(request.encrypted_queries)}",
                )
            answers = self._evaluate(hosted, request.key_id, list(request.encrypted_queries), context, owner)
            return knn_pb2.ClassifyBatchResponse(encrypted_classes=answers)

    # ------------------------------------------------------------------ helpers

    def _fair_caller(self, owner: str, context) -> str:
        """Whom evaluation slots are shared between (``server.common.fair_share``): the owner when
        callers are identified, else the anonymous caller's address or connection."""
        return caller_key(context, owner if self._identities.enforced else None)

    def _evaluate(
        self, hosted: HostedModel, key_id: str, ciphertexts: list[bytes], context, owner: str
    ) -> list[bytes]:
        """Validate here, evaluate wherever the evaluator runs, within the call's deadline."""
        path = self._key_path(key_id, hosted, context, owner)
        ciphertexts = [self._check_ciphertext(hosted, ciphertext, context) for ciphertext in ciphertexts]
        try:
            answers = self._evaluator.classify(
                Evaluation(
                    hosted.model.name, key_id, path, ciphertexts, context.time_remaining(), context.is_active
                )
            )
            self._keys.mark_used(key_id)  # only a successful evaluation keeps a key alive
            return answers
        except KeysUnusable as exc:
            self._forget(key_id)
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except EvaluationRejected as exc:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except EvaluationTimedOut as exc:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(exc))
        except ClusterUnavailable as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        raise AssertionError("context.abort returned")  # pragma: no cover

    def _warm_up(self, key_id: str, hosted: HostedModel, ciphertext: bytes, context, owner: str) -> None:
        """Prepare freshly registered keys now (``server.knn.key_warmup``); a warm-up query that does
        not fit rejects the registration, since it was made with the same keys."""
        path = self._key_path(key_id, hosted, context, owner)
        _, problem = warm_up(
            self._evaluator,
            Evaluation(hosted.model.name, key_id, path, [ciphertext], context.time_remaining()),
        )
        if problem:
            self._forget(key_id)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        if self._warmups is not None:
            self._warmups.put(key_id, ciphertext)

    def _forget(self, key_id: str) -> None:
        self._keys.forget(key_id)
        self._evaluator.forget(key_id)
        with self._checked_lock:
            self._checked_keys.discard(key_id)

    def _check_stored(self, key_id: str, hosted: HostedModel, path: Path) -> None:
        """Check a stored key set's file against the model the first time this process uses it
        (``ForeignBytes`` or ``OSError``): it must be the model's key set exactly as this server
        writes it (re-encoded by the check, ``crypto.knn.wire_format``)."""
        with self._checked_lock:
            if key_id in self._checked_keys:
                return
        data = path.read_bytes()
        if hosted.wire.check_keys(data) != data:
            raise ForeignBytes("the stored file is not a key set as this server writes it")
        with self._checked_lock:
            self._checked_keys.add(key_id)

    def _model(self, name: str, context) -> HostedModel:
        return model_named(self._models, name, context)

    def _check_ciphertext(self, hosted: HostedModel, data: bytes, context) -> bytes:
        """The query re-encoded from what was checked (the only bytes concrete sees), or the call
        ends with INVALID_ARGUMENT."""
        if len(data) > MAX_QUERY_BYTES:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"an encrypted query is at most {MAX_QUERY_BYTES} bytes, got {len(data)}",
            )
        try:
            checked = hosted.wire.check_input(data)  # before concrete: a foreign layout kills it
            parse_ciphertext(checked)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad encrypted query: {exc}")
        return checked

    def _key_path(self, key_id: str, hosted: HostedModel, context, owner: str) -> Path:
        """The registered key set's file, checked against the model (the call ends otherwise)."""
        try:
            path = self._keys.locate(key_id, key_tag(hosted), owner if self._identities.enforced else None)
            self._check_stored(key_id, hosted, path)
            return path
        except (ForeignBytes, OSError) as exc:
            self._forget(key_id)
            abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the registered evaluation keys are unusable: {exc}",
            )
        except MalformedKeyId as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except KeyNotFound as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except KeyForAnotherModel as exc:
            if exc.registered.split("@")[0] == hosted.model.name:  # keys for an earlier circuit
                self._forget(key_id)
                context.abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"unknown or expired key id {key_id}: model {hosted.model.name!r} has changed since "
                    "it was registered; upload your evaluation keys again",
                )
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        raise AssertionError("context.abort returned")  # pragma: no cover


def key_tag(hosted: HostedModel) -> str:
    """What stored keys are registered under: the model's name and its client specs' digest.
    Keys made for an earlier circuit of the same name (the server restarted with another n, k or
    bit width) are never given to the new one: concrete crashes the process when evaluation keys
    do not fit the circuit (found by the cluster benchmark), so they are answered as unknown."""
    return f"{hosted.model.name}@{hosted.specs_sha256[:16]}"


def _check_key_file(hosted: HostedModel, path: Path) -> None:
    """The key store's check, before it evicts anything for an upload: the bytes must be a key set
    of exactly this model's circuit (``crypto.knn.wire_format``), and its re-encoding (what is
    stored, the only bytes concrete ever reads) must parse as concrete evaluation keys
    (``ValueError`` otherwise). Nothing here runs the keys."""
    data = path.read_bytes()
    checked = hosted.wire.check_keys(data)
    parse_evaluation_keys(checked)
    if checked != data:  # pointers the schema does not list, another segment layout: dropped
        path.write_bytes(checked)
