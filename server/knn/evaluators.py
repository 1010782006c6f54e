"""Where encrypted k-NN evaluations run, behind one interface: in this process
(:class:`LocalEvaluator`, the default) or on a Dask cluster
(``server.knn.cluster_evaluation.ClusterEvaluator``, with ``--cluster`` / ``--local-workers``).

The servicer (``server.knn.service``) validates every request, holds the key store and maps the
exceptions below to gRPC statuses; an evaluator only runs ``server.run`` on bytes it is handed:
the model's name, a registered key set's id and file, and serialized ciphertexts. Both keep the
last few deserialised (and, after their first run, prepared) key sets in memory.

A model is one whole circuit, or a split module with its stage graph (``crypto.knn.split``: one
query's work over partitions of the training set). Both evaluators run either: the local one runs
a graph's nodes one after another in this process, the cluster one sends each partition's nodes to
a different worker. Either way the client's one ciphertext goes in and one encrypted class comes
out; nothing between the stages leaves the server.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from concrete import fhe

from petlab.crypto.knn.deployment import parse_ciphertext, parse_evaluation_keys, run_encrypted, run_split
from petlab.crypto.knn.split.program import StageGraph
from petlab.errors import BadInput, Unavailable

log = logging.getLogger(__name__)

# deserialised evaluation key sets kept in memory, charged at their stored size (40 MB for Iris's,
# about 100 MB for breast_cancer's, 200 MB for digits'): room for the callers being served, so
# that callers taking turns do not reload each other's keys
KEY_CACHE_BYTES = 1 << 30


class EvaluationRejected(BadInput):
    """The ciphertext or the keys do not fit the model (the caller's fault: INVALID_ARGUMENT)."""


class KeysUnusable(EvaluationRejected):
    """The registered key file no longer deserialises: the key set is to be forgotten."""


class EvaluationTimedOut(Unavailable):
    """The call's deadline passed, or the call ended, before the evaluation (DEADLINE_EXCEEDED)."""

    grpc_status = "DEADLINE_EXCEEDED"


class ClusterUnavailable(Unavailable):
    """The cluster could not answer within the attempts (no workers, scheduler gone: UNAVAILABLE)."""


@dataclass(frozen=True)
class Evaluation:
    """What an evaluator is asked to run: a model's circuit on ciphertexts with one registered key
    set, within ``timeout`` seconds while ``still_wanted()`` (the call is still active)."""

    model: str
    key_id: str
    key_path: Path
    ciphertexts: list[bytes]
    timeout: float | None = None
    still_wanted: Callable[[], bool] = lambda: True


class Evaluator(Protocol):
    """Runs the hosted models' circuits on clients' ciphertexts with their evaluation keys."""

    def classify(self, evaluation: Evaluation) -> list[bytes]:
        """The encrypted classes of ``evaluation.ciphertexts``, in order; ``EvaluationRejected``,
        ``EvaluationTimedOut`` or ``ClusterUnavailable`` otherwise."""
        ...

    def forget(self, key_id: str) -> None:
        """Drop whatever the evaluator holds of a key set (it expired or was rejected)."""
        ...

    def close(self) -> None: ...

    @property
    def prepared_capacity(self) -> int:
        """How many stored key sets are worth preparing at start (what the cache keeps)."""
        ...


def warm_up(evaluator: Evaluator, evaluation: Evaluation) -> tuple[bool, str]:
    """Prepare a key set with one discarded evaluation (``server.knn.key_warmup``):
    ``(prepared, problem)``. A problem is the client's (the query or the keys do not fit) and
    rejects the keys; "" means none, or a failure of the evaluator's own (logged: the keys stay)."""
    try:
        for ciphertext in evaluation.ciphertexts:
            parse_ciphertext(ciphertext)
        evaluator.classify(evaluation)
    except KeysUnusable as exc:
        return False, str(exc)
    except (ValueError, EvaluationRejected) as exc:
        return False, f"the warm-up query does not fit: {exc}"
    except (EvaluationTimedOut, ClusterUnavailable) as exc:
        log.warning("keys %s not prepared: %s", evaluation.key_id, exc)
        return False, ""
    return True, ""


class LocalEvaluator:
    """Evaluations in this process. One evaluation of a model at a time (a lock per model):
    concrete already uses every core within one evaluation."""

    def __init__(
        self,
        servers: Mapping[str, fhe.Server],
        graphs: Mapping[str, StageGraph] | None = None,
        cache_bytes: int = KEY_CACHE_BYTES,
    ):
        self._servers = dict(servers)
        self._graphs = dict(graphs or {})  # split models: their stage graphs, run node by node
        self._locks = {name: threading.Lock() for name in self._servers}
        self._keys: OrderedDict[str, tuple[fhe.EvaluationKeys, int]] = OrderedDict()
        self._keys_lock = threading.Lock()
        self._cache_bytes = cache_bytes

    @property
    def prepared_capacity(self) -> int:
        return 2

    def classify(self, evaluation: Evaluation) -> list[bytes]:
        keys = self._evaluation_keys(evaluation.key_id, evaluation.key_path)
        queries = []
        for ciphertext in evaluation.ciphertexts:
            try:
                queries.append(parse_ciphertext(ciphertext))
            except ValueError as exc:
                raise EvaluationRejected(f"bad encrypted query: {exc}") from exc
        answers = []
        for query in queries:  # the model is released between the queries of a batch
            with self._locks[evaluation.model]:
                if not evaluation.still_wanted():
                    raise EvaluationTimedOut("the call ended before evaluation began")
                server, graph = self._servers[evaluation.model], self._graphs.get(evaluation.model)
                try:
                    if graph is None:
                        answers.append(run_encrypted(server, keys, query))
                    else:
                        answers.append(run_split(server, keys, graph, query))
                except ValueError as exc:
                    raise EvaluationRejected(str(exc)) from exc
        return answers

    def forget(self, key_id: str) -> None:
        with self._keys_lock:
            self._keys.pop(key_id, None)

    def close(self) -> None:
        with self._keys_lock:
            self._keys.clear()

    def _evaluation_keys(self, key_id: str, key_path: Path) -> fhe.EvaluationKeys:
        with self._keys_lock:
            if key_id in self._keys:
                self._keys.move_to_end(key_id)
                return self._keys[key_id][0]
        try:
            data = key_path.read_bytes()
            keys = parse_evaluation_keys(data)
        except (ValueError, OSError) as exc:
            raise KeysUnusable(f"the registered evaluation keys are unusable: {exc}") from exc
        with self._keys_lock:
            self._keys[key_id] = keys, len(data)
            while len(self._keys) > 1 and sum(size for _, size in self._keys.values()) > self._cache_bytes:
                self._keys.popitem(last=False)
        return keys

    def cached_keys(self) -> list[str]:
        """The key ids whose deserialised keys are in memory, least recently used first."""
        with self._keys_lock:
            return list(self._keys)
