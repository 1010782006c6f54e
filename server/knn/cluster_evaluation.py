"""Encrypted k-NN evaluations on a Dask cluster (``petlab-server serve --cluster | --local-workers``).

The gRPC front end keeps all I/O: request validation, key uploads, the key store, slots and
deadlines (:mod:`petlab.server.knn.service`). A worker only runs ``server.run`` on bytes:

* Only bytes cross the wire: each model's server artifact (the zip concrete writes), a client's
  evaluation keys as uploaded, ciphertexts in and out. Nothing a client sent is unpickled; a worker
  deserialises keys and ciphertexts with concrete's own ``deserialize``, as the in-process path does.
* Each model's artifact is scattered to every worker once, at start; a worker loads it once (kept
  by SHA-256 of the artifact) and serialises its evaluations of that model (concrete already uses
  every core within one evaluation, so run workers with one thread each).
* A client's key bytes are scattered once to the key's *home* worker (rendezvous hashing of the
  key's SHA-256 over the current workers) and held there while the front end holds their future.
  A query goes to the first worker in the key's rendezvous order with none of this front end's
  evaluations in flight, else to the home (``workers=[chosen]``, ``allow_other_workers=True`` so the
  scheduler may still move it): the home while the load is light, the key's next workers under
  load, and each of those fetches the bytes from a peer once. Each worker keeps
  the last :data:`WORKER_KEY_CACHE` deserialised (and, after their first run, prepared) key sets
  in an LRU keyed by SHA-256.
* A worker that dies mid-evaluation: the scheduler reruns the task elsewhere; if the key bytes died
  with it, the front end scatters them again and resubmits. Either way within the call's deadline,
  after which the future is cancelled and the call ends with DEADLINE_EXCEEDED. A query whose
  evaluation kills every worker that runs it (concrete crashes on some mismatched keys; the
  scheduler gives up after ``distributed.scheduler.allowed-failures`` deaths) is not resubmitted:
  UNAVAILABLE, so one bad query cannot crash the cluster in a loop.

* A split model (``crypto.knn.split``: the model's artifact is a module of stages over P
  partitions of the training set) runs ONE query on several workers: each node of its stage graph
  is a task, whose inputs are the query's bytes or the futures of the nodes it reads, so the
  stages' outputs (serialised ciphertexts) move worker to worker and never through the front end.
  Partition p's nodes go to worker ``(p + r) mod W`` (``allow_other_workers``), r rotating per
  query so that P < W still spreads queries; merge and finish nodes run where the scheduler puts
  them (next to their inputs). Every worker may run a stage, so the key bytes are broadcast to
  all of them (and a worker that joins later fetches them from a peer). A stage's rejection
  travels down the graph as an answer; a lost worker's intermediate results are recomputed by the
  scheduler from the graph.

What the cluster's machines see: the compiled circuit, evaluation keys and ciphertexts (for a
split model also the stages' encrypted intermediate values: each partition's k smallest
distances, D_k and the votes, all encrypted under the client's key); never a secret key, never a
query, an intermediate value or an answer in the clear (docs/explanation/threat-models.md,
"Scaling out").
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from concrete import fhe

from petlab.crypto.knn.deployment import (
    parse_ciphertext,
    parse_evaluation_keys,
    run_encrypted,
    run_stage,
    start_concrete_runtime,
)
from petlab.crypto.knn.split.program import QUERY, StageGraph
from petlab.dask_cluster import ClusterSpec, DaskCluster
from petlab.server.knn.evaluators import (
    ClusterUnavailable,
    Evaluation,
    EvaluationRejected,
    EvaluationTimedOut,
)

log = logging.getLogger(__name__)

WORKER_KEY_CACHE = 2  # deserialised key sets per worker (tens to hundreds of MB each)
FRONT_END_KEY_FUTURES = 32  # key sets whose bytes the cluster holds for the front end
ATTEMPTS = 3  # submissions of one evaluation (lost key bytes, a worker killed repeatedly)
TASK_RETRIES = 1  # Dask's own retries of a task that raised (not counting worker deaths)
WATCH_SECONDS = 1.0
WORKER_WAIT_SECONDS = 30.0  # a query waits this long (within its deadline) for a worker to join


# ------------------------------------------------------------------ on the workers

_worker_lock = threading.Lock()
_models: dict[str, tuple[fhe.Server, threading.Lock]] = {}
_keys: OrderedDict[str, fhe.EvaluationKeys] = OrderedDict()
_loads = {"models": 0, "keys": 0, "evaluations": 0, "stages": 0}


def _model(digest: str, artifact: bytes) -> tuple[fhe.Server, threading.Lock]:
    with _worker_lock:
        if digest not in _models:
            if hashlib.sha256(artifact).hexdigest() != digest:
                raise ValueError("the model artifact does not match its digest")
            path = Path(tempfile.mkdtemp(prefix="petlab-model-")) / "server.zip"
            path.write_bytes(artifact)
            _models[digest] = (fhe.Server.load(str(path)), threading.Lock())
            _loads["models"] += 1
        return _models[digest]


def _evaluation_keys(digest: str, key_bytes: bytes) -> fhe.EvaluationKeys:
    with _worker_lock:
        if digest in _keys:
            _keys.move_to_end(digest)
            return _keys[digest]
    keys = parse_evaluation_keys(key_bytes)
    with _worker_lock:
        _keys[digest] = keys
        _loads["keys"] += 1
        while len(_keys) > WORKER_KEY_CACHE:
            _keys.popitem(last=False)
    return keys


def evaluate_on_worker(
    model_digest: str, artifact: bytes, key_digest: str, key_bytes: bytes, ciphertext: bytes
) -> tuple[bool, bytes | str]:
    """One encrypted evaluation (a Dask task): ``(True, encrypted class)`` or ``(False, why the
    query or keys do not fit)``; those are answers, not errors, so Dask does not retry them."""
    server, lock = _model(model_digest, artifact)
    try:
        keys = _evaluation_keys(key_digest, key_bytes)
        query = parse_ciphertext(ciphertext)
        with lock:
            result = run_encrypted(server, keys, query)
    except ValueError as exc:
        return False, str(exc)
    with _worker_lock:
        _loads["evaluations"] += 1
    return True, result


def run_stage_on_worker(
    model_digest: str, artifact: bytes, key_digest: str, key_bytes: bytes, stage: str, *inputs: Any
) -> tuple[bool, bytes | str]:
    """One node of a split model's graph (a Dask task). ``inputs``: the query's bytes, or the
    ``(ok, payload)`` answers of the nodes it reads; the first upstream rejection is passed on
    unchanged, so the answer node carries it. Returns ``(True, encrypted output)`` or
    ``(False, why the query or keys do not fit)``."""
    for item in inputs:
        if isinstance(item, tuple) and not item[0]:
            return item
    server, lock = _model(model_digest, artifact)
    try:
        keys = _evaluation_keys(key_digest, key_bytes)
        values = [parse_ciphertext(item[1] if isinstance(item, tuple) else item) for item in inputs]
        with lock:
            result = run_stage(server, keys, stage, values).serialize()
    except ValueError as exc:
        return False, str(exc)
    with _worker_lock:
        _loads["stages"] += 1
    return True, result


def concrete_runtime_plugin() -> Any:
    """A Dask worker plugin that starts concrete's runtime as each worker joins, from the worker's
    main thread (``deployment.start_concrete_runtime``): without it, a worker that has evaluated
    dies by SIGSEGV when a peer's connection closes under a write (the split path moves stages'
    values worker to worker). Built here so that importing this module does not import Dask."""
    from distributed import WorkerPlugin

    class ConcreteRuntime(WorkerPlugin):
        name = "petlab-concrete-runtime"

        def setup(self, worker: Any) -> None:
            start_concrete_runtime()

    return ConcreteRuntime()


def worker_cache_info() -> dict[str, int]:
    """This worker's loads and evaluations so far (``client.run(worker_cache_info)``)."""
    with _worker_lock:
        return {**_loads, "cached_keys": len(_keys), "cached_models": len(_models)}


# ------------------------------------------------------------------ on the front end


def artifact_bytes(server: fhe.Server) -> bytes:
    """A loaded model's server artifact, as the zip concrete writes."""
    with tempfile.TemporaryDirectory(prefix="petlab-artifact-") as scratch:
        path = Path(scratch) / "server.zip"
        server.save(str(path))
        return path.read_bytes()


def rendezvous_order(key_digest: str, workers: list[str]) -> list[str]:
    """The key's preference order over the workers (rendezvous hashing; the first is its home):
    stable while workers come and go, so only a gone worker's keys move."""
    return sorted(workers, key=lambda w: hashlib.sha256(f"{key_digest}|{w}".encode()).digest(), reverse=True)


def home_worker(key_digest: str, workers: list[str]) -> str:
    return rendezvous_order(key_digest, workers)[0]


class ClusterEvaluator:
    """Sends evaluations of the hosted models to a Dask cluster (module docstring)."""

    prepared_capacity = WORKER_KEY_CACHE  # what each worker keeps in memory

    def __init__(
        self,
        cluster: DaskCluster,
        servers: dict[str, fhe.Server],
        graphs: dict[str, StageGraph] | None = None,
    ):
        self.cluster = cluster
        self._graphs = dict(graphs or {})  # split models (module docstring)
        self._rotation = 0
        self._client = cluster.client
        self._lock = threading.Lock()
        self._artifacts = {name: artifact_bytes(server) for name, server in servers.items()}
        self._model_digests = {name: hashlib.sha256(a).hexdigest() for name, a in self._artifacts.items()}
        self._model_futures: dict[str, Any] = {}
        self._key_futures: OrderedDict[str, tuple[str, Any]] = OrderedDict()  # key id -> digest, future
        self._workers: list[str] = []
        self._in_flight: dict[str, int] = {}  # this front end's evaluations per worker
        self._placed: dict[str, str] = {}  # task key -> the worker it was counted against
        self.key_scatters = 0  # key sets sent to the cluster (once per key, unless lost with a worker)
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._client.register_plugin(concrete_runtime_plugin())  # every worker, now and later
        if self.refresh_workers():  # else at the first query (a scatter would wait for workers)
            for name in self._artifacts:
                self._model_future(name)

    @classmethod
    def start(
        cls, spec: ClusterSpec, servers: dict[str, fhe.Server], graphs: dict[str, StageGraph] | None = None
    ) -> ClusterEvaluator:
        cluster = DaskCluster.start(spec)
        try:
            return cls(cluster, servers, graphs)
        except Exception:
            cluster.close()
            raise

    # ---------------------------------------------------------------- workers and health

    def refresh_workers(self) -> list[str]:
        try:
            workers = sorted(self._client.scheduler_info(n_workers=-1)["workers"])
        except Exception:  # the scheduler is gone: as good as no workers
            workers = []
        with self._lock:
            self._workers = workers
        return workers

    def watch(self, on_change: Callable[[bool], None]) -> None:
        """Call ``on_change(serving)`` now (before returning) and whenever the cluster gains its
        first worker or loses its last one (polled every :data:`WATCH_SECONDS`)."""
        serving = bool(self.refresh_workers())
        on_change(serving)

        def loop() -> None:
            nonlocal serving
            while not self._stop.wait(WATCH_SECONDS):
                now = bool(self.refresh_workers())
                if now != serving:
                    serving = now
                    log.log(
                        logging.INFO if now else logging.WARNING, "cluster workers: %d", len(self._workers)
                    )
                    on_change(now)

        self._watcher = threading.Thread(target=loop, name="petlab-cluster-watch", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        self.cluster.close()

    # ---------------------------------------------------------------- evaluations

    def classify(self, evaluation: Evaluation) -> list[bytes]:
        """The encrypted classes of the ciphertexts (in order), evaluated on the cluster within the
        evaluation's timeout. ``EvaluationRejected``, ``EvaluationTimedOut`` or
        ``ClusterUnavailable`` otherwise."""
        model, key_id, key_path = evaluation.model, evaluation.key_id, evaluation.key_path
        ciphertexts, timeout = evaluation.ciphertexts, evaluation.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        problem = "the cluster has no workers"
        for attempt in range(ATTEMPTS):
            workers = self._workers or self._wait_for_workers(deadline)
            if not workers:
                break
            model_future = self._model_future(model)
            graph = self._graphs.get(model)
            key_digest, key_future = self._key_future(key_id, key_path, workers, everywhere=graph is not None)
            task = (self._model_digests[model], model_future, key_digest, key_future)
            if graph is None:
                futures = wanted = self._submit_whole(
                    task, ciphertexts, rendezvous_order(key_digest, workers)
                )
            else:
                futures, wanted = self._submit_split(task, ciphertexts, graph, workers)
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                answers = _gather_within(wanted, remaining)
            except EvaluationTimedOut:
                self._client.cancel(futures)
                raise
            except Exception as exc:  # a lost worker took the key bytes with it
                if _killed_workers(exc):  # the query itself killed workers (the scheduler's
                    self._client.cancel(futures)  # allowed-failures): never resubmit it
                    raise ClusterUnavailable(f"the evaluation killed the workers that ran it: {exc}") from exc
                problem = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "evaluation attempt %d of %d failed (%s); resubmitting", attempt + 1, ATTEMPTS, problem
                )
                self._client.cancel(futures)
                self._forget_key(key_id)
                self.refresh_workers()
                continue
            finally:  # counted as done before the caller can send its next query
                for future in futures:
                    self._finished(future.key)
            rejected = [str(payload) for ok, payload in answers if not ok]
            if rejected:
                raise EvaluationRejected(rejected[0])
            return [bytes(payload) for _, payload in answers]
        raise ClusterUnavailable(f"the evaluation cluster could not answer: {problem}")

    def _submit_whole(self, task: tuple, ciphertexts: list[bytes], order: list[str]) -> list:
        """One task per query, each on the first idle worker of the key's rendezvous order."""
        futures = []
        for ciphertext in ciphertexts:
            target = self._choose(order)
            future = self._client.submit(
                evaluate_on_worker,
                *task,
                ciphertext,
                workers=[target],
                allow_other_workers=True,
                retries=TASK_RETRIES,
                pure=False,
            )
            self._track(future, target)
            futures.append(future)
        return futures

    def _submit_split(
        self, task: tuple, ciphertexts: list[bytes], graph: StageGraph, workers: list[str]
    ) -> tuple[list, list]:
        """One task per node of the graph, per query (module docstring): every future, and each
        query's answer future."""
        futures, answers = [], []
        for ciphertext in ciphertexts:
            with self._lock:
                rotation, self._rotation = self._rotation, self._rotation + 1
            values: dict[str, Any] = {QUERY: ciphertext}
            for node in graph.nodes:
                placement: dict[str, Any] = {}
                if node.partition is not None:
                    target = workers[(node.partition + rotation) % len(workers)]
                    placement = {"workers": [target], "allow_other_workers": True}
                future = self._client.submit(
                    run_stage_on_worker,
                    *task,
                    node.stage,
                    *(values[source] for source in node.inputs),
                    retries=TASK_RETRIES,
                    pure=False,
                    **placement,
                )
                values[node.name] = future
                futures.append(future)
            answers.append(values[graph.answer.name])
        return futures, answers

    def _wait_for_workers(self, deadline: float | None) -> list[str]:
        """Workers, waiting up to :data:`WORKER_WAIT_SECONDS` (and the deadline) for one to
        (re)join: a restarting worker is a transient, not an outage."""
        give_up = time.monotonic() + WORKER_WAIT_SECONDS
        if deadline is not None:
            give_up = min(give_up, deadline)
        while not (workers := self.refresh_workers()) and time.monotonic() < give_up:
            time.sleep(0.2)
        return workers

    def _choose(self, order: list[str]) -> str:
        """The first worker of ``order`` with nothing of ours in flight, else the key's home."""
        with self._lock:
            target = next((w for w in order if not self._in_flight.get(w)), order[0])
            self._in_flight[target] = self._in_flight.get(target, 0) + 1
        return target

    def in_flight(self) -> dict[str, int]:
        """This front end's evaluations running or queued, per worker it chose."""
        with self._lock:
            return {worker: count for worker, count in self._in_flight.items() if count}

    def _track(self, future: Any, worker: str) -> None:
        """Count ``future`` against ``worker`` until it is done (whichever of its callback and
        the gathering caller comes first)."""
        with self._lock:
            self._placed[future.key] = worker
        future.add_done_callback(lambda done: self._finished(done.key))
        if future.done():
            self._finished(future.key)

    def _finished(self, task_key: Any) -> None:
        with self._lock:
            worker = self._placed.pop(task_key, None)
            if worker is not None:
                self._in_flight[worker] = max(self._in_flight.get(worker, 0) - 1, 0)

    def forget(self, key_id: str) -> None:
        """Release a key's bytes on the cluster (the key expired or was rejected)."""
        self._forget_key(key_id)

    def _model_future(self, model: str) -> Any:
        with self._lock:
            future = self._model_futures.get(model)
            if future is not None and future.status == "finished":
                return future
        future = self._client.scatter(self._artifacts[model], broadcast=True, hash=False)
        with self._lock:
            self._model_futures[model] = future
        return future

    def _key_future(
        self, key_id: str, key_path: Path, workers: list[str], everywhere: bool = False
    ) -> tuple[str, Any]:
        """The future of a key set's bytes on the cluster: on its home worker, or on every worker
        (``everywhere``: a split model's stages run on all of them)."""
        with self._lock:
            held = self._key_futures.get(key_id)
            if held is not None and held[1].status == "finished":
                self._key_futures.move_to_end(key_id)
                return held
        data = key_path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if everywhere:
            future = self._client.scatter(data, broadcast=True, hash=False)
        else:
            future = self._client.scatter(data, workers=[home_worker(digest, workers)], hash=False)
        with self._lock:
            self.key_scatters += 1
            self._key_futures[key_id] = (digest, future)
            while len(self._key_futures) > FRONT_END_KEY_FUTURES:
                self._key_futures.popitem(last=False)  # dropping the future frees the worker's copy
        return digest, future

    def _forget_key(self, key_id: str) -> None:
        with self._lock:
            self._key_futures.pop(key_id, None)


def _killed_workers(exc: Exception) -> bool:
    from distributed import KilledWorker

    return isinstance(exc, KilledWorker)


def _gather_within(futures: list, seconds: float | None) -> list:
    """The futures' results, or ``EvaluationTimedOut`` after ``seconds`` in all (None: no limit)."""
    deadline = None if seconds is None else time.monotonic() + seconds
    results = []
    for future in futures:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise EvaluationTimedOut("the call's deadline passed before the cluster answered")
        try:
            results.append(future.result(timeout=remaining))
        except TimeoutError as exc:
            raise EvaluationTimedOut("the call's deadline passed before the cluster answered") from exc
    return results
