"""Client/server split of a compiled HE-kNN-V circuit, as plain functions over bytes.

The system model of Ameur et al. (PSD 2022, Section 3.1, Fig. 1): the querier (client) generates the
keys, encrypts its query and decrypts the result; the data owner (server) evaluates the circuit on
ciphertexts with the client's *evaluation* keys only. Secret keys exist only in :class:`KnnClient`;
no function on the server side of this module accepts or returns them.

Serialised forms are concrete-python's own (no pickles): the server artifact is the zip written by
``fhe.Server.save``; client specs, evaluation keys and ciphertexts are ``serialize()`` bytes.

A split model (``crypto.knn.split``: one query over partitions of the training set) is a module of
several functions under one key set: the client encrypts its query for ``ENTRY_STAGE`` and
decrypts ``ANSWER_STAGE``'s output; the server runs the stage graph (:func:`run_split`), every
step on the server, and the client sees one ciphertext in and one out, as for a whole circuit.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import numpy as np
from concrete import fhe
from concrete.compiler import init_dfr

from petlab.crypto.knn.split.program import ANSWER_STAGE, ENTRY_STAGE, Node, StageGraph, run_graph
from petlab.crypto.knn.wire_format import WireFormat

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- server side (data owner)


def start_concrete_runtime() -> None:
    """Start concrete's runtime now, from the main thread, and ignore SIGPIPE again.

    concrete-python 2.11's runtime (HPX) installs its own SIGPIPE handler when it starts (``init_dfr``,
    or else inside the first ``server.run``), replacing Python's SIG_IGN; from then on a write to
    a peer that has gone (a Dask TLS connection between workers, a log pipe) kills the process by
    SIGSEGV instead of raising ``BrokenPipeError`` (a LocalCluster connection
    closing would kill the process that had evaluated in process). Python can set a disposition only
    from the main thread, and later runs do not install the handler again, so every process that
    evaluates calls this first: the server at start, each Dask worker as it joins."""
    if threading.current_thread() is not threading.main_thread():
        log.warning("concrete's runtime not started from the main thread: SIGPIPE stays its own")
        return
    init_dfr()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def save_server(circuit: fhe.Circuit | fhe.Module, path: Path) -> None:
    """Write the compiled server artifact (a zip) to ``path`` (a circuit's, or a split module's)."""
    circuit.server.save(str(path))


def load_server(path: Path) -> fhe.Server:
    """Load a server artifact this process (or an earlier run of it) wrote.

    concrete unpacks the zip into a temporary directory; call ``server.cleanup()`` when done and
    load each artifact once per process.
    """
    return fhe.Server.load(str(path))


def client_specs_bytes(server: fhe.Server) -> bytes:
    """Public description of the circuit's keys and encodings, for clients (``circuit.server``
    for a freshly compiled circuit)."""
    return server.client_specs.serialize()


def parse_evaluation_keys(data: bytes) -> fhe.EvaluationKeys:
    """Deserialise a client's evaluation keys; ``ValueError`` if the bytes are not keys."""
    if not data:
        raise ValueError("evaluation keys are empty")
    try:
        return fhe.EvaluationKeys.deserialize(bytes(data))
    except Exception as exc:  # concrete raises RuntimeError subclasses of its own
        raise ValueError(f"evaluation keys do not deserialize: {exc}") from exc


def parse_ciphertext(data: bytes) -> fhe.Value:
    """Deserialise an encrypted value; ``ValueError`` if the bytes are not a ciphertext."""
    if not data:
        raise ValueError("ciphertext is empty")
    try:
        return fhe.Value.deserialize(bytes(data))
    except Exception as exc:
        raise ValueError(f"ciphertext does not deserialize: {exc}") from exc


def run_encrypted(server: fhe.Server, evaluation_keys: fhe.EvaluationKeys, query: fhe.Value) -> bytes:
    """Evaluate the circuit on one encrypted query; returns the serialised encrypted class.

    ``ValueError`` when the ciphertext does not fit this circuit (wrong shape, another model's keys).
    """
    try:
        result = server.run(query, evaluation_keys=evaluation_keys)
    except Exception as exc:
        raise ValueError(f"the encrypted query does not fit this model: {exc}") from exc
    return result.serialize()


def run_stage(
    server: fhe.Server, evaluation_keys: fhe.EvaluationKeys, stage: str, inputs: list[fhe.Value]
) -> fhe.Value:
    """One stage of a split model on encrypted inputs (the query, or other stages' outputs).
    ``ValueError`` when they do not fit it."""
    try:
        return server.run(*inputs, evaluation_keys=evaluation_keys, function_name=stage)
    except Exception as exc:
        raise ValueError(f"the encrypted query does not fit this model: {exc}") from exc


def run_split(
    server: fhe.Server, evaluation_keys: fhe.EvaluationKeys, graph: StageGraph, query: fhe.Value
) -> bytes:
    """A split model's whole graph on one encrypted query, node by node in this process; returns
    the serialised encrypted class (``ValueError`` as :func:`run_stage`)."""

    def run(node: Node, inputs: list) -> fhe.Value:
        return run_stage(server, evaluation_keys, node.stage, inputs)

    return run_graph(graph, query, run)[graph.answer.name].serialize()


# ---------------------------------------------------------------- client side (querier)


class KnnClient:
    """Key holder and encryptor for one model's circuit. Secret keys never leave this object
    except through :meth:`secret_keys_bytes`, meant for the client's own owner-only cache."""

    def __init__(self, specs: bytes):
        try:
            self._client = fhe.Client(fhe.ClientSpecs.deserialize(bytes(specs)))
            program = self._client.specs.program_info
            # the result check reads the specs as concrete does (not as another JSON parser would)
            self._wire = WireFormat.from_specs(bytes(program.serialize()))
            functions = list(program.function_list())
        except Exception as exc:
            raise ValueError(f"client specs do not deserialize: {exc}") from exc
        # a whole circuit has one function; a split model encrypts for its entry stage and
        # answers from its last (crypto.knn.split.program)
        if len(set(functions)) != len(functions):  # concrete decrypts with the first of a name
            raise ValueError(f"client specs name functions {functions}, some twice")
        if len(functions) == 1:
            self._entry = self._answer = functions[0]
        elif ENTRY_STAGE in functions and ANSWER_STAGE in functions:
            self._entry, self._answer = ENTRY_STAGE, ANSWER_STAGE
        else:
            raise ValueError(
                f"client specs name functions {functions}, neither one circuit nor a split model"
            )

    def generate_keys(self, secret_seed: int | None = None, encryption_seed: int | None = None) -> None:
        """Fresh keys from the OS's secure randomness (seeds only for reproducible tests)."""
        self._client.keys.generate(force=True, secret_seed=secret_seed, encryption_seed=encryption_seed)

    def load_keys(self, data: bytes) -> None:
        """Load keys saved with :meth:`secret_keys_bytes`; ``ValueError`` for anything else."""
        try:
            self._client.keys.load_from_bytes(bytes(data))
        except Exception as exc:
            raise ValueError(f"these bytes are not a client's key set: {exc}") from exc

    def secret_keys_bytes(self) -> bytes:
        """All keys, secret ones included: store only with owner-only permissions."""
        return self._client.keys.serialize()

    def evaluation_keys_bytes(self) -> bytes:
        """The public evaluation keys the server needs; contains no secret key."""
        return self._client.evaluation_keys.serialize()

    def encrypt(self, levels: np.ndarray) -> bytes:
        """Encrypt one quantized query (the model's quantizer gives the levels)."""
        value = self._client.encrypt(np.asarray(levels, dtype=np.int64), function_name=self._entry)
        return value.serialize()

    def decrypt_class(self, result: bytes) -> int:
        """Decrypt the server's answer: the class index. The answer is checked against the
        answering circuit's output first (``crypto.knn.wire_format``): concrete's decryption of a
        ciphertext in another layout writes outside its buffer, in the process that holds the
        secret key (``ValueError``, nothing decrypted); concrete reads only the result re-encoded
        by that check, never pointers a hostile server added."""
        checked = self._wire.check_output(result)
        return int(self._client.decrypt(parse_ciphertext(checked), function_name=self._answer))
