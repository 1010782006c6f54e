"""The device's side of encrypted k-NN over gRPC: a thin layer over ``crypto.knn.deployment``.

Client specs are checked against concrete's 128-bit parameters (``client.parameter_check``) before any
key is made. Keys are made once per (server, model, client specs) and cached under ``~/.cache/petlab`` (or
``$PETLAB_CLIENT_CACHE``): ``keys.bin`` holds the secret key and is written owner-only (0600) and
atomically; ``key_id`` remembers the server's id for the uploaded evaluation keys. Unreadable keys
are made anew, and a ``key_id`` that is not a key id (32 lowercase hex digits) is dropped, each
with a message naming the file: the keys are then uploaded again. When the server answers that the
key id is unknown (expired, evicted, server reset) the keys are uploaded again, once, and the call
retried. ``stats`` holds every successful call's latency and bytes
(``client.call_stats``).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from pathlib import Path

import grpc
import numpy as np

from petlab.client.call_stats import CallRecorder, CallStats
from petlab.client.channel import make_channel  # noqa: F401  (re-exported: the clients' one channel)
from petlab.client.key_cache import default_cache_dir
from petlab.client.parameter_check import check_security
from petlab.crypto.knn.deployment import KnnClient
from petlab.crypto.knn.families import encode_query, family
from petlab.crypto.knn.quantization import MinMaxQuantizer
from petlab.owner_only import private_directory, write_owner_only
from petlab.progress import bar, say
from petlab.protos import knn_pb2, knn_pb2_grpc
from petlab.terminal_text import shown

CHUNK_BYTES = 1 << 20


@dataclass
class PreparedModel:
    info: knn_pb2.ModelInfo
    client: KnnClient
    quantizer: MinMaxQuantizer
    directory: Path
    key_id: str = ""
    keygen_seconds: float = 0.0
    key_bytes: int = 0

    def encrypt_levels(self, levels: np.ndarray) -> bytes:
        """Encrypt one quantized query in the encoding of the model's circuit family
        (``ModelInfo.algorithm``: the levels themselves, or the thermo family's thermometer code)."""
        return self.client.encrypt(encode_query(self.info.algorithm or "paper", levels, self.info.bits))


@dataclass
class KnnRemote:
    channel: grpc.Channel
    server_label: str
    cache_dir: Path = field(default_factory=lambda: default_cache_dir())
    timeout: float | None = None
    show_progress: bool = True
    stats: list[CallStats] = field(default_factory=list)

    def __post_init__(self) -> None:
        # every successful call's latency and bytes land in self.stats (client.call_stats)
        self.stub = knn_pb2_grpc.KnnServiceStub(
            grpc.intercept_channel(self.channel, CallRecorder(self.stats))
        )

    # ------------------------------------------------------------------ setup

    def models(self) -> list[knn_pb2.ModelInfo]:
        return list(self._unary("ListModels", knn_pb2.ListModelsRequest()).models)

    def prepare(self, model: str) -> PreparedModel:
        """Client specs, cached or fresh keys, and a registered key id."""
        reply = self._unary("GetClientSpecs", knn_pb2.GetClientSpecsRequest(model=model))
        digest = verified_specs_digest(reply.client_specs, reply.specs_sha256)
        check_security(reply.client_specs)  # before any key is made or loaded under these specs
        directory = private_directory(self.key_directory() / _safe(model) / digest[:16])
        client = KnnClient(reply.client_specs)
        quantizer = quantizer_of(reply.model)
        family(reply.model.algorithm or "paper")  # ValueError: a family this client cannot encode for
        prepared = PreparedModel(reply.model, client, quantizer, directory)
        keys_file, id_file = directory / "keys.bin", directory / "key_id"
        loaded = False
        if keys_file.is_file():
            try:
                client.load_keys(keys_file.read_bytes())
                loaded = True
            except ValueError:
                self.say(f"the cached keys in {keys_file} are unreadable; making new ones")
        if not loaded:
            id_file.unlink(missing_ok=True)  # a registered id belongs to keys we no longer hold
            self.say(f"generating keys for {model} (once per model; takes a while)")
            started = time.perf_counter()
            client.generate_keys()
            prepared.keygen_seconds = time.perf_counter() - started
            write_owner_only(keys_file, client.secret_keys_bytes())
        prepared.key_id = cached_key_id(id_file, self.say)
        if not prepared.key_id:
            self.upload_keys(prepared)
        return prepared

    def key_directory(self) -> Path:
        """This server's directory in the key cache (created owner-only, like its parent)."""
        private_directory(self.cache_dir)
        return private_directory(self.cache_dir / _safe(self.server_label))

    def upload_keys(self, prepared: PreparedModel) -> str:
        data = prepared.client.evaluation_keys_bytes()
        digest = hashlib.sha256(data).hexdigest()
        prepared.key_bytes = len(data)
        upload = bar(
            total=len(data),
            unit="B",
            unit_scale=True,
            desc="uploading evaluation keys",
            disable=not self.show_progress,
            leave=False,
        )

        warmup = prepared.encrypt_levels(np.zeros(prepared.info.d, dtype=np.int64))

        def chunks() -> Iterator[knn_pb2.KeyChunk]:
            for offset in range(0, len(data), CHUNK_BYTES):
                piece = data[offset : offset + CHUNK_BYTES]
                if offset == 0:
                    message = knn_pb2.KeyChunk(
                        model=prepared.info.name,
                        total_size=len(data),
                        sha256=digest,
                        data=piece,
                        warmup_query=warmup,  # lets the server prepare the keys now (key_warmup)
                    )
                else:
                    message = knn_pb2.KeyChunk(data=piece)
                upload.update(len(piece))
                yield message

        try:  # a busy server's refusal (its retry hint) is asked again, as for a classification
            reply = self._when_not_busy(
                lambda timeout: self.stub.RegisterKeys(chunks(), timeout=timeout), upload.reset
            )
        finally:
            upload.close()
        prepared.key_id = reply.key_id
        write_owner_only(prepared.directory / "key_id", reply.key_id.encode())
        return reply.key_id

    # ------------------------------------------------------------------ queries

    def classify(self, prepared: PreparedModel, features: np.ndarray) -> int:
        """Class index of one row of raw features."""
        query = prepared.encrypt_levels(prepared.quantizer.transform(np.asarray(features, dtype=float)))

        def call():
            request = knn_pb2.ClassifyRequest(
                model=prepared.info.name, key_id=prepared.key_id, encrypted_query=query
            )
            return self._unary("Classify", request).encrypted_class

        return checked_class(prepared.client.decrypt_class(self._with_key(prepared, call)), prepared.info)

    def classify_batch(self, prepared: PreparedModel, rows: np.ndarray, batch_size: int = 8) -> list[int]:
        levels = prepared.quantizer.transform(np.asarray(rows, dtype=float))
        answers: list[int] = []
        done = bar(total=len(levels), desc="classifying", unit="row", disable=not self.show_progress)
        for start in range(0, len(levels), batch_size):
            queries = [prepared.encrypt_levels(q) for q in levels[start : start + batch_size]]

            def call(queries=queries):
                request = knn_pb2.ClassifyBatchRequest(
                    model=prepared.info.name, key_id=prepared.key_id, encrypted_queries=queries
                )
                return self._unary("ClassifyBatch", request).encrypted_classes

            answers += [
                checked_class(prepared.client.decrypt_class(r), prepared.info)
                for r in self._with_key(prepared, call)
            ]
            done.update(len(queries))
        done.close()
        return answers

    # ------------------------------------------------------------------ plumbing

    def _with_key(self, prepared: PreparedModel, call):
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND or "key id" not in (exc.details() or ""):
                raise
            self.say("the server no longer knows our evaluation keys; uploading them again")
            self.upload_keys(prepared)
            return call()

    def _unary(self, method: str, request):
        """One call; a server that is busy (RESOURCE_EXHAUSTED, with its ``retry-after-s`` hint) is
        asked again after the hint, with jitter, until the call's own timeout would pass. Not gRPC's
        retry policy (service config): grpcio 1.85 clamps maxAttempts to 5 (it logs so), so under a
        flood a device would give up after about 20 s of the server's 5 s hints instead of at its
        deadline, and a policy is per channel, so every caller of ``make_channel`` (tests and
        experiments that count refusals) would retry too."""
        return self._when_not_busy(lambda timeout: getattr(self.stub, method)(request, timeout=timeout))

    def _when_not_busy(self, call, before_retry=lambda: None):
        """``call(timeout)``, asked again after the server's ``retry-after-s`` hint (with jitter)
        while the server answers busy, until this client's own timeout would pass. A refusal
        without the hint (a quota, a cap) is final."""
        deadline = time.monotonic() + (self.timeout if self.timeout is not None else 3600.0)
        while True:
            try:
                return call(max(1.0, deadline - time.monotonic()))
            except grpc.RpcError as exc:
                hint = _retry_after(exc)
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or hint is None:
                    raise
                wait = hint * (1 + random.random())
                if time.monotonic() + wait >= deadline:
                    raise
                self.say(f"the server is busy; asking again in {wait:.0f} s")
                time.sleep(wait)
                before_retry()

    def say(self, message: str) -> None:
        if self.show_progress:
            say(message)


KEY_ID = re.compile(r"[0-9a-f]{32}")  # what RegisterKeys returns (server.knn.key_store)


def cached_key_id(path: Path, say=print) -> str:
    """The key id cached in ``path``, or "" when there is none to use: missing, or not a key id
    (overwritten, damaged); such a file is removed and ``say`` tells which, so the caller uploads
    the keys again and caches the new id, as it remakes unreadable keys."""
    if not path.is_file():
        return ""
    text = path.read_bytes().strip()
    if KEY_ID.fullmatch(text.decode("ascii", "replace")):
        return text.decode("ascii")
    path.unlink(missing_ok=True)
    say(f"the cached key id in {path} is not a key id; uploading the evaluation keys again")
    return ""


class ClassOutOfRange(ValueError):
    """A decrypted answer names no class of the model: a faulty or hostile server."""


def checked_class(index: int, info: knn_pb2.ModelInfo) -> int:
    """``index``, a class of the model the server described, or ``ClassOutOfRange``. The check
    cannot tell a wrong class that is in range (a malicious server can choose any class it likes:
    ``docs/explanation/device-trust.md``)."""
    if not 0 <= index < len(info.class_names):
        raise ClassOutOfRange(
            f"its answer decrypts to class {index}, but it describes model {shown(info.name, 64)!r} "
            f"with {len(info.class_names)} classes (a faulty or hostile server)"
        )
    return index


def answer_guarantee(info: knn_pb2.ModelInfo) -> str:
    """What the device can say of the model's answers from ``ModelInfo.global_p_error``, the
    error budget the server compiled the circuit with: each answer equals the clear k-NN answer
    (the model's own integer algorithm on the quantized query) except with at most that
    probability (concrete's bound on a wrong lookup in one evaluation; a wrong lookup need not
    change the class). The figure is printed rounded up to two significant digits. A server's
    description is input like any other: 0 (a server older than the field) or a value outside
    (0, 1) states no bound. ``ModelInfo.rounding`` "approximate" (concrete's approximate rounding
    of the distances, whose one-step errors fall outside the budget) or a rounding the device does
    not know claims no bound either; empty (a server older than the field) is "exact". It says
    nothing of a hostile server, which can answer any class (docs/explanation/device-trust.md)."""
    budget = info.global_p_error
    name = shown(info.name, 64)
    rounding = info.rounding or "exact"
    if rounding not in ("exact", "approximate"):
        return (
            f"model {name!r} states a rounding the device does not know ({shown(rounding, 32)!r}): how "
            "often an answer may differ from the clear k-NN answer is unknown"
        )
    if budget == 0:
        return (
            f"model {name!r} states no error budget: how often an answer may differ from the clear "
            "k-NN answer is unknown"
        )
    if not (math.isfinite(budget) and 0 < budget < 1):
        return (
            f"model {name!r} states an error budget that is not a probability ({budget!r}): how often "
            "an answer may differ from the clear k-NN answer is unknown"
        )
    if rounding == "approximate":
        return (
            f"model {name!r} rounds its distances approximately: an answer may differ from the clear "
            f"k-NN answer more often than its error budget of {bound_text(budget)} says (a point's "
            "distance may land one step off; the budget bounds the other lookups only)"
        )
    return (
        f"each answer equals the clear k-NN answer of model {name!r} except with probability at most "
        f"{bound_text(budget)} (its error budget)"
    )


def bound_text(probability: float) -> str:
    """``probability`` rounded UP to two significant digits (a bound is never printed smaller than
    the decimal the float stands for: its shortest repr, so 1e-4 prints as 0.0001)."""
    exact = Decimal(repr(float(probability)))
    step = Decimal(1).scaleb(exact.adjusted() - 1)
    return f"{float(exact.quantize(step, rounding=ROUND_CEILING)):g}"


def quantizer_of(info: knn_pb2.ModelInfo) -> MinMaxQuantizer:
    """The model's published quantizer (bits and per-feature bounds in ``ModelInfo``), validated:
    the server's description is input like any other (ValueError when it is not a quantizer)."""
    return MinMaxQuantizer.from_dict(
        {"bits": info.bits, "lows": list(info.feature_lows), "highs": list(info.feature_highs)}
    )


def _retry_after(exc: grpc.RpcError) -> float | None:
    """The server's ``retry-after-s`` hint (bounded to 1..60 s; 5 s when it does not parse),
    None without one."""
    trailing = getattr(exc, "trailing_metadata", lambda: None)() or ()
    for key, value in trailing:
        if key == "retry-after-s":
            try:
                return min(60.0, max(1.0, float(value)))
            except ValueError:
                return 5.0
    return None


def verified_specs_digest(specs: bytes, announced: str) -> str:
    """The SHA-256 of the client specs, which names their cache directory. The server's
    ``specs_sha256`` is accepted only as 64 lowercase hex digits equal to the digest computed here:
    a hostile server could otherwise steer where the secret keys are written (``../..``, an
    absolute path) or pair keys with specs they were not made for."""
    computed = hashlib.sha256(specs).hexdigest()
    if not re.fullmatch(r"[0-9a-f]{64}", announced or "") or announced != computed:
        raise ValueError("the server's client specs do not match their announced SHA-256; refusing them")
    return computed


def _safe(name: str) -> str:
    """One path component made of safe characters; never empty, ``.`` or ``..``."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return "_" if cleaned.strip(".") == "" else cleaned
