"""gRPC servicer for encrypted k-NN: a thin layer over ``crypto.knn.deployment`` and the key store.

Every request field is validated before any work, and every failure is a domain error that names
its status (``server.common.rpc_errors``; the server's boundary interceptor answers it) with a
sentence for a person: unknown model -> NOT_FOUND; unknown or expired key id -> NOT_FOUND; a key
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
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

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
from petlab.server.common.admission import OwnerSlots, ServiceLimits, UploadPace
from petlab.server.common.call_log import logged_stream_in, logged_unary
from petlab.server.common.callers import CallerIdentities
from petlab.server.common.fair_share import FairSlots, caller_key
from petlab.server.common.rpc_errors import InvalidRequest, model_named
from petlab.server.common.worker_threads import run_in
from petlab.server.knn.evaluators import Evaluation, Evaluator, KeysUnusable, warm_up
from petlab.server.knn.key_store import KeyForAnotherModel, KeyNotFound, KeyStore
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
            rounding=self.model.rounding,
        )


class KnnServicer(knn_pb2_grpc.KnnServiceServicer):
    """The k-NN service on the event loop; key checks, storage and evaluations run on ``pool``."""

    def __init__(
        self,
        models: dict[str, HostedModel],
        keys: KeyStore,
        evaluator: Evaluator,
        warmups: WarmupStore | None = None,
        limits: ServiceLimits | None = None,
        identities: CallerIdentities | None = None,
        pool: Executor | None = None,
    ):
        self._models, self._keys, self._evaluator, self._warmups = models, keys, evaluator, warmups
        self._limits = limits or ServiceLimits()
        self._identities = identities or CallerIdentities()
        self._pool = pool or ThreadPoolExecutor(
            self._limits.evaluation_slots, thread_name_prefix="petlab-knn"
        )
        enforced = self._identities.enforced
        self._upload_slots: FairSlots | None = None  # made on the loop (asyncio futures)
        self._evaluation_slots: FairSlots | None = None  # made on the loop (asyncio futures)
        self._owner_uploads = OwnerSlots(self._limits.owner_upload_slots, "key uploads", enforced)
        self._owner_evaluations = OwnerSlots(self._limits.owner_evaluation_slots, "evaluations", enforced)
        self._checked_keys: set[str] = set()  # stored key ids whose file this process has checked
        self._checked_lock = threading.Lock()

    def use_pool(self, pool: Executor) -> None:
        """Run key checks, storage and evaluations on ``pool`` (the server's k-NN threads)."""
        self._pool = pool

    @property
    def evaluation_slots(self) -> FairSlots:
        if self._evaluation_slots is None:
            self._evaluation_slots = FairSlots(
                self._limits.evaluation_slots,
                "evaluations",
                self._limits.evaluation_waiting,
                self._limits.evaluation_wait_seconds,
            )
        return self._evaluation_slots

    @property
    def upload_slots(self) -> FairSlots:
        """Key uploads shared fairly between callers, as evaluations are: a caller that keeps
        re-taking every slot with slow uploads cannot keep a new device from registering (it
        waits for the next slot released, ahead of callers already holding theirs)."""
        if self._upload_slots is None:
            self._upload_slots = FairSlots(
                self._limits.upload_slots,
                "key uploads",
                self._limits.evaluation_waiting,
                self._limits.evaluation_wait_seconds,
            )
        return self._upload_slots

    def prepare_stored_keys(self) -> int:
        """At server start: prepare the most recently used stored keys that have a warm-up query
        (as many as the evaluator keeps in memory). Returns how many."""
        if self._warmups is None:
            return 0
        prepared = 0
        stored = sorted(self._keys.entries(), key=lambda k: k.last_used, reverse=True)
        by_tag = {key_tag(h): h for h in self._models.values()}  # keys made for these circuits only
        self._warmups.keep_only({key.key_id for key in stored})
        for key in stored:
            hosted, ciphertext = by_tag.get(key.model), self._warmups.get(key.key_id)
            if prepared >= self._evaluator.prepared_capacity or hosted is None or ciphertext is None:
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
    async def ListModels(self, request, context):
        self._identities.owner(context)
        return knn_pb2.ListModelsResponse(models=[m.info() for m in self._models.values()])

    @logged_unary
    async def GetClientSpecs(self, request, context):
        self._identities.owner(context)
        hosted = model_named(self._models, request.model)
        return knn_pb2.GetClientSpecsResponse(
            model=hosted.info(), client_specs=hosted.specs, specs_sha256=hosted.specs_sha256
        )

    @logged_stream_in
    async def RegisterKeys(self, request_iterator, context):
        owner = self._identities.owner(context)
        with self._owner_uploads.held(owner):
            async with self.upload_slots.held(self._fair_caller(owner, context)):
                pace = UploadPace(self._limits)
                messages = pace.messages(request_iterator, lambda message: len(message.data))
                first = await anext(messages, None)
                if first is None:
                    raise InvalidRequest("the key upload was empty")
                hosted = model_named(self._models, first.model)
                if len(first.warmup_query) > MAX_QUERY_BYTES:
                    raise InvalidRequest("the warm-up query is too large")
                # before any byte is buffered: the store's caps, the owner's quota, the model's size
                self._keys.check_announced(first.total_size, hosted.key_size_window, key_tag(hosted))
                chunks = [first.data]
                received = len(first.data)
                async for chunk in messages:
                    if chunk.model or chunk.total_size or chunk.sha256 or chunk.warmup_query:
                        raise InvalidRequest(
                            "only the first chunk may carry model, total_size, sha256 and warmup_query"
                        )
                    received += len(chunk.data)
                    if received > first.total_size:
                        raise InvalidRequest(
                            f"the upload sent more than the announced {first.total_size} bytes"
                        )
                    chunks.append(chunk.data)
                # every byte is in: the checks and the disk are the server's work, on the pool
                return await run_in(
                    self._pool, self._register, hosted, owner, first, chunks, self._deadline(context)
                )

    def _register(
        self, hosted: HostedModel, owner: str, first, chunks: list[bytes], deadline: Deadline
    ) -> knn_pb2.RegisterKeysResponse:
        """In a worker thread: check the warm-up query, store and verify the keys, warm them up."""
        warmup = b""
        if first.warmup_query:  # checked before any byte is stored
            try:
                warmup = hosted.wire.check_input(first.warmup_query)
            except ForeignBytes as exc:
                raise InvalidRequest(f"the warm-up query does not fit: {exc}") from exc
        # KeyTooLarge (the store's cap or the owner's quota), UploadMismatch: the store's answer
        stored = self._keys.put(
            key_tag(hosted),
            owner,
            first.total_size,
            first.sha256,
            iter(chunks),
            verify=lambda path: _check_key_file(hosted, path),
            size_window=hosted.key_size_window,
        )
        chunks.clear()
        with self._checked_lock:
            self._checked_keys.add(stored.key_id)
        if warmup:
            self._warm_up(stored.key_id, hosted, warmup, owner, deadline)
        return knn_pb2.RegisterKeysResponse(key_id=stored.key_id, size=stored.size)

    @logged_unary
    async def Classify(self, request, context):
        owner = self._identities.owner(context)
        hosted = model_named(self._models, request.model)
        with self._owner_evaluations.held(owner):
            (answer,) = await self._evaluate(
                hosted, request.key_id, [request.encrypted_query], context, owner
            )
        return knn_pb2.ClassifyResponse(encrypted_class=answer)

    @logged_unary
    async def ClassifyBatch(self, request, context):
        owner = self._identities.owner(context)
        hosted = model_named(self._models, request.model)
        if not request.encrypted_queries:
            raise InvalidRequest("the batch holds no queries")
        if len(request.encrypted_queries) > MAX_BATCH:
            raise InvalidRequest(
                f"a batch holds at most {MAX_BATCH} queries, got {len(request.encrypted_queries)}"
            )
        with self._owner_evaluations.held(owner):
            answers = await self._evaluate(
                hosted, request.key_id, list(request.encrypted_queries), context, owner
            )
        return knn_pb2.ClassifyBatchResponse(encrypted_classes=answers)

    # ------------------------------------------------------------------ helpers

    def _fair_caller(self, owner: str, context) -> str:
        """Whom evaluation slots are shared between (``server.common.fair_share``): the owner when
        callers are identified, else the anonymous caller's address or connection."""
        return caller_key(context, owner if self._identities.enforced else None)

    @staticmethod
    def _deadline(context) -> Deadline:
        remaining = context.time_remaining()
        return Deadline(None if remaining is None else time.monotonic() + remaining)

    async def _evaluate(
        self, hosted: HostedModel, key_id: str, ciphertexts: list[bytes], context, owner: str
    ) -> list[bytes]:
        """Each query in its own turn of the fair shares (a batch of m queries takes m turns): its
        checks and its evaluation on the pool while the turn is held, so the pool only ever has
        admitted work; within the call's deadline."""
        deadline = self._deadline(context)
        caller = self._fair_caller(owner, context)
        answers = []
        for ciphertext in ciphertexts:
            async with self.evaluation_slots.held(caller):
                answers.append(
                    await run_in(self._pool, self._check_and_run, hosted, key_id, ciphertext, owner, deadline)
                )
        self._keys.mark_used(key_id)  # only a successful evaluation keeps a key alive
        return answers

    def _check_and_run(
        self, hosted: HostedModel, key_id: str, ciphertext: bytes, owner: str, deadline: Deadline
    ) -> bytes:
        """In a worker thread: the key and the query checked, then one evaluation."""
        path = self._key_path(key_id, hosted, owner)
        checked = self._check_ciphertext(hosted, ciphertext)
        evaluation = Evaluation(hosted.model.name, key_id, path, [checked], deadline.remaining())
        (answer,) = self._run(evaluation, key_id)
        return answer

    def _run(self, evaluation: Evaluation, key_id: str) -> list[bytes]:
        """In a worker thread: one evaluation (its failures are the evaluator's domain errors:
        INVALID_ARGUMENT, DEADLINE_EXCEEDED, UNAVAILABLE); keys that no longer load are forgotten."""
        try:
            return self._evaluator.classify(evaluation)
        except KeysUnusable:
            self._forget(key_id)
            raise

    def _warm_up(
        self, key_id: str, hosted: HostedModel, ciphertext: bytes, owner: str, deadline: Deadline
    ) -> None:
        """Prepare freshly registered keys now (``server.knn.key_warmup``); a warm-up query that does
        not fit rejects the registration, since it was made with the same keys."""
        path = self._key_path(key_id, hosted, owner)
        _, problem = warm_up(
            self._evaluator,
            Evaluation(hosted.model.name, key_id, path, [ciphertext], deadline.remaining()),
        )
        if problem:
            self._forget(key_id)
            raise InvalidRequest(problem)
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

    def _check_ciphertext(self, hosted: HostedModel, data: bytes) -> bytes:
        """The query re-encoded from what was checked (the only bytes concrete sees), or the call
        ends with INVALID_ARGUMENT."""
        if len(data) > MAX_QUERY_BYTES:
            raise InvalidRequest(f"an encrypted query is at most {MAX_QUERY_BYTES} bytes, got {len(data)}")
        try:
            checked = hosted.wire.check_input(data)  # before concrete: a foreign layout kills it
            parse_ciphertext(checked)
        except ValueError as exc:  # ForeignBytes, or concrete's own refusal of the bytes
            raise InvalidRequest(f"bad encrypted query: {exc}") from exc
        return checked

    def _key_path(self, key_id: str, hosted: HostedModel, owner: str) -> Path:
        """The registered key set's file, checked against the model; else the store's answer
        (MalformedKeyId, KeyNotFound, KeyForAnotherModel) or KeysUnusable."""
        try:
            path = self._keys.locate(key_id, key_tag(hosted), owner if self._identities.enforced else None)
            self._check_stored(key_id, hosted, path)
            return path
        except (ForeignBytes, OSError) as exc:
            self._forget(key_id)
            raise KeysUnusable(f"the registered evaluation keys are unusable: {exc}") from exc
        except KeyForAnotherModel as exc:
            if exc.registered.split("@")[0] != hosted.model.name:
                raise
            self._forget(key_id)  # keys for an earlier circuit of this model
            raise KeyNotFound(
                f"unknown or expired key id {key_id}: model {hosted.model.name!r} has changed since "
                "it was registered; upload your evaluation keys again"
            ) from exc


@dataclass(frozen=True)
class Deadline:
    """When a call must be over (monotonic seconds; None: the caller set no deadline)."""

    at: float | None

    def remaining(self) -> float | None:
        return None if self.at is None else max(self.at - time.monotonic(), 0.0)


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
