"""Shared, session-scoped fixtures: each circuit is compiled once per test session, and every test
that needs a running server starts it the same way (:func:`serving`, the ``serve`` fixture)."""

from __future__ import annotations

import faulthandler
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import capnp
import numpy as np
import pytest
from filelock import FileLock
from hypothesis import HealthCheck, settings

from petlab.crypto.knn.config import CircuitConfig
from petlab.crypto.knn.deployment import KnnClient, start_concrete_runtime
from petlab.crypto.knn.model import KnnModel, KnnSettings, build_model
from petlab.crypto.knn.wire_format import SCHEMA
from petlab.owner_only import write_owner_only
from petlab.server.app import RunningServer, ServerOptions, start
from petlab.server.knn.datasets import Dataset, load_bundled
from petlab.server.knn.model_cache import load_or_compile
from petlab.server.knn.service import HostedModel

# Hypothesis profiles, in one place. Tests set only their own example budget (``max_examples``).
# ``ci`` (the default, what ``make test`` runs): the same examples every run (derandomized, no
# example database), so a run is reproducible and two xdist workers draw what one process draws;
# no per-example deadline (a circuit or a server call has no fixed time on a shared 2-core machine).
# ``dev`` (``HYPOTHESIS_PROFILE=dev``): new random examples each run, failures remembered in
# ``.hypothesis/`` and replayed first, for hunting bugs locally.
settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: Past pytest-timeout's limit (pyproject.toml): a hang that holds the interpreter's lock (a thread
#: inside a C library, where pytest-timeout's own thread cannot run) still ends the test process.
HANG_EXIT_SECONDS = 330
#: Where that process's stacks go (pytest captures the test's own stderr, which a crash loses);
#: the session prints the file at its end.
HANG_LOG = Path(__file__).resolve().parents[1] / ".petlab-cache" / "hung-tests.log"


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controlling process, once
        HANG_LOG.unlink(missing_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """faulthandler's C thread, which needs no interpreter lock, writes every thread's stack to
    :data:`HANG_LOG` and ends the process with status 1 if a test is still running after
    :data:`HANG_EXIT_SECONDS` (under pytest-xdist the session reports the test as crashed and goes
    on with a new worker)."""
    HANG_LOG.parent.mkdir(exist_ok=True)
    with HANG_LOG.open("a") as log:  # written only by a hung test (its stack names it)
        faulthandler.dump_traceback_later(HANG_EXIT_SECONDS, exit=True, file=log)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if HANG_LOG.exists() and HANG_LOG.stat().st_size:
        terminalreporter.section(f"hung tests: every thread's stack ({HANG_LOG})")
        terminalreporter.write(HANG_LOG.read_text(errors="replace"))


# the longest a worker waits for another to compile a circuit and generate its keys
SHARED_BUILD_TIMEOUT = 600


@pytest.fixture(scope="session", autouse=True)
def concrete_runtime() -> None:
    """concrete's runtime installs a SIGPIPE handler the first time it runs anything (a simulation
    included), and the test process would then die by SIGSEGV when a LocalCluster's TLS connection
    closed under a write (``tests/server/knn/test_split_knn.py`` run on its own). Started
    here, as the server and every Dask worker start it (``deployment.start_concrete_runtime``)."""
    start_concrete_runtime()


@pytest.fixture(scope="session")
def iris_split() -> tuple[Dataset, Dataset]:
    return load_bundled("iris").split()


def _iris_model(split: tuple[Dataset, Dataset], algorithm: str) -> KnnModel:
    """``algorithm``'s model of Iris's training split, n = 40, k = 3, 4 bits."""
    train, _ = split
    settings = KnnSettings(n=40, k=3, bits=4, algorithm=algorithm)
    return build_model("iris", train.features, train.labels, settings, train.class_names, train.feature_names)


@pytest.fixture(scope="session")
def iris_model(iris_split) -> KnnModel:
    """The paper's algorithm (Ameur et al.), n = 40, k = 3, 4 bits."""
    return _iris_model(iris_split, "paper")


@pytest.fixture(scope="session")
def iris_fast_model(iris_split) -> KnnModel:
    """The fast algorithm, n = 40, k = 3, 4 bits."""
    return _iris_model(iris_split, "fast")


# ---------------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class RunShare:
    """A directory (0700) every pytest-xdist worker of this run shares (under the workers' common
    base temporary directory, xdist's documented pattern; this session's own without xdist), where
    compiled circuits and test keys are built once per run, not once per worker."""

    directory: Path

    @classmethod
    def of(cls, tmp_path_factory: pytest.TempPathFactory, name: str) -> RunShare:
        base = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):
            base = base.parent
        directory = base / name
        directory.mkdir(mode=0o700, exist_ok=True)
        return cls(directory)

    def lock(self, *what: object) -> FileLock:
        """The lock under which ``what``'s artifacts are built or read: the first worker to take it
        compiles (and generates keys) into the directory; another waits for it, then loads."""
        digest = hashlib.sha256(repr(what).encode()).hexdigest()[:16]
        return FileLock(self.directory / f"{digest}.lock", timeout=SHARED_BUILD_TIMEOUT)

    @staticmethod
    def keys(client: KnnClient, lock: FileLock, seed: int) -> None:
        """Give ``client`` the keys stored beside ``lock`` (held by the caller), generated from
        ``seed`` and stored (owner-only) by the first worker to need them."""
        path = Path(lock.lock_file).with_suffix(".keys")
        if path.exists():
            client.load_keys(path.read_bytes())
        else:
            client.generate_keys(secret_seed=seed, encryption_seed=seed)
            write_owner_only(path, client.secret_keys_bytes())


@pytest.fixture(scope="session")
def run_share(tmp_path_factory) -> RunShare:
    """:class:`RunShare` ``shared-builds``, for a module's own compiled circuits and keys."""
    return RunShare.of(tmp_path_factory, "shared-builds")


def _bundled_model(name: str, settings: KnnSettings) -> KnnModel:
    train, _ = load_bundled(name).split()
    return build_model(name, train.features, train.labels, settings, train.class_names, train.feature_names)


@pytest.fixture(scope="session")
def hosted_model(tmp_path_factory) -> Callable[..., HostedModel]:
    """``hosted_model("iris", KnnSettings(n=6, k=3))``: a bundled data set's model as a server
    hosts it (trained on the split's training part, as ``petlab-server`` does), compiled at most
    once per run for each (data set, settings), in one worker, and loaded from the run's shared
    model cache by the others; shared by every test module. Sharing one loaded ``fhe.Server``
    across servers is safe: ``RunningServer.stop`` calls its ``cleanup()``, which is a no-op in
    concrete-python 2.11 (it never removes its directory)."""
    share = RunShare.of(tmp_path_factory, "compiled-models")
    made: dict[tuple[str, KnnSettings], HostedModel] = {}

    def make(name: str, settings: KnnSettings) -> HostedModel:
        if (name, settings) not in made:
            model = _bundled_model(name, settings)
            with share.lock(name, settings):
                compiled = load_or_compile(model, CircuitConfig(), share.directory)
            made[name, settings] = HostedModel(model, compiled.server, dataset=name)
        return made[name, settings]

    return make


@pytest.fixture(scope="session")
def keyed_model(tmp_path_factory) -> Callable[..., tuple[HostedModel, KnnClient]]:
    """``keyed_model("iris", KnnSettings(n=10, k=3))``: a bundled data set's model compiled with the
    configuration ``petlab-server`` uses for it (``KnnModel.circuit_config``), and a client of it
    holding generated keys (fixed seeds); compiled and keyed at most once per run, in one worker
    (the others load the circuit and the serialized keys: one key set per circuit in the whole
    run). For tests that need real keys and ciphertexts of a circuit other than a server's."""
    share = RunShare.of(tmp_path_factory, "keyed-models")
    made: dict[tuple[str, KnnSettings], tuple[HostedModel, KnnClient]] = {}

    def make(name: str, settings: KnnSettings) -> tuple[HostedModel, KnnClient]:
        if (name, settings) not in made:
            model = _bundled_model(name, settings)
            with share.lock(name, settings) as lock:
                compiled = load_or_compile(model, model.circuit_config(), share.directory)
                hosted = HostedModel(model, compiled.server, dataset=name)
                client = KnnClient(hosted.specs)
                share.keys(client, lock, seed=23)
            made[name, settings] = hosted, client
        return made[name, settings]

    return make


# concrete's key sets and values both have three pointer fields at the root; this one more, which
# concrete's schema does not list (the listed fields are carried as they are)
WIDER_SCHEMA = """@0xe1c6ac7b32a5a3f1;
struct Wider { f0 @0 :AnyPointer; f1 @1 :AnyPointer; f2 @2 :AnyPointer; unlisted @3 :List(Data); }
"""


@pytest.fixture(scope="session")
def with_unlisted_pointer(tmp_path_factory) -> Callable[[bytes, list[bytes]], bytes]:
    """``with_unlisted_pointer(message, blobs)``: concrete's key set or ciphertext ``message`` with a
    fourth root pointer field holding ``blobs``: a field concrete copies as it reads it, and a
    reader of the listed fields never sees."""
    path = tmp_path_factory.mktemp("schema") / "wider.capnp"
    path.write_text(WIDER_SCHEMA)
    wider = capnp.load(str(path))

    def widen(message: bytes, blobs: list[bytes]) -> bytes:
        with wider.Wider.from_bytes(message, traversal_limit_in_words=len(message)) as reader:
            builder = reader.as_builder()
        field = builder.init("unlisted", len(blobs))
        for i, blob in enumerate(blobs):
            field[i] = blob
        return bytes(builder.to_bytes())

    return widen


@pytest.fixture(scope="session")
def recut() -> Callable[[bytes], bytes]:
    """``recut(ciphertext)``: the same ciphertext, its payload cut into two blobs (concrete writes
    one, and reads another cut outside its buffer)."""

    def cut(ciphertext: bytes) -> bytes:
        with SCHEMA.Value.from_bytes(ciphertext) as reader:
            value = reader.as_builder()
        payload = b"".join(bytes(blob) for blob in value.payload.data)
        blobs = value.payload.init("data", 2)
        blobs[0], blobs[1] = payload[:8], payload[8:]
        return value.to_bytes()

    return cut


@contextmanager
def serving(
    data_dir: Path, hosted: dict[str, HostedModel] | None = None, **options
) -> Iterator[RunningServer]:
    """The one way the tests start a server: ``start(ServerOptions.of(...))`` on a free loopback port
    (``port=0``), no models unless given, stopped with a one-second grace on exit (stopping twice is
    harmless, so a test may stop it itself)."""
    settings = {"models": [], "port": 0, **options}
    running = start(ServerOptions.of(data_dir, **settings), hosted)
    try:
        yield running
    finally:
        running.stop(grace=1)


@pytest.fixture(scope="session")
def serve() -> Callable[..., AbstractContextManager[RunningServer]]:
    """:func:`serving`, as a fixture: ``with serve(tmp_path, hosted, ...) as running: ...``."""
    return serving


def _simulate_all(circuit, queries, reference=None):
    """Simulated classes of ``queries``. Concrete's simulation reproduces the circuit's bootstrap
    failures at its ``global_p_error`` (seen once in a full suite run: one query of forty); so, given
    the clear ``reference``, a query that disagrees is simulated twice more and kept only if it
    disagrees every time. A wrong circuit disagrees deterministically and still fails."""
    out = np.array([int(circuit.simulate(q)) for q in queries])
    if reference is not None:
        for i in np.flatnonzero(out != np.asarray(reference)):
            retries = [int(circuit.simulate(queries[i])) for _ in range(2)]
            if all(r == reference[i] for r in retries):
                out[i] = reference[i]
    return out


@pytest.fixture(scope="session")
def simulate_all():
    """``simulate_all(circuit, queries, reference)``: see :func:`_simulate_all`."""
    return _simulate_all


class SilentRequests:
    """Request iterators for client streams that send nothing: each waits for ``release`` (20 s at
    most) and then ends, so a call made with one holds its stream open, idle, until then."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self) -> Iterator[Any]:
        self.release.wait(20)
        return
        yield


@pytest.fixture
def silent_requests() -> Iterator[SilentRequests]:
    """``call(silent_requests(), ...)``: a stream that sends nothing until the test sets
    ``silent_requests.release`` (set at the latest when the test ends)."""
    silent = SilentRequests()
    try:
        yield silent
    finally:
        silent.release.set()


# ---------------------------------------------------------------------------------- held-out rows


@pytest.fixture
def kept_points(monkeypatch) -> list[tuple[np.ndarray, np.ndarray]]:
    """The points the owner keeps, ``(training rows, labels)``, of every model the evaluation
    pipeline (``experiments.knn_accuracy``) builds from now on, in the order it builds them."""
    from petlab.experiments import knn_accuracy

    kept: list[tuple[np.ndarray, np.ndarray]] = []

    def recording_build_model(*args, **kwargs) -> KnnModel:
        model = build_model(*args, **kwargs)
        kept.append((model.plan.train.copy(), model.plan.labels.copy()))
        return model

    monkeypatch.setattr(knn_accuracy, "build_model", recording_build_model)
    return kept


@pytest.fixture
def replace_held_out_rows(monkeypatch) -> Callable[..., None]:
    """``replace_held_out_rows(features=...)``: from then on ``Dataset.split`` returns the same
    training part and every held-out row replaced: each label moved to the next class and, with
    ``features``, the features drawn uniformly within the held-out rows' range (seeded)."""
    original_split = Dataset.split

    def replace(*, features: bool) -> None:
        def split_with_other_test_rows(self, test_fraction=0.2, seed=0):
            train, test = original_split(self, test_fraction, seed)
            other = test.features
            if features:
                rng = np.random.default_rng(1)
                low, high = test.features.min(axis=0), test.features.max(axis=0)
                other = rng.uniform(low, high, size=test.features.shape)
            labels = (test.labels + 1) % (int(self.labels.max()) + 1)
            return train, Dataset(test.name, other, labels, test.class_names, test.feature_names)

        monkeypatch.setattr(Dataset, "split", split_with_other_test_rows)

    return replace


# ---------------------------------------------------------------------------------- Dask


@pytest.fixture(scope="session")
def local_cluster():
    """One real ``LocalCluster`` of 2 worker processes (1 thread each) for every cluster test,
    started as ``--local-workers`` starts it (mutual TLS under a temporary key pair). Its key pair is
    put in Dask's configuration for the session, as an operator configures ``--cluster`` clients,
    so tests may connect by its address."""
    import dask

    from petlab.dask_cluster import ClusterSpec, DaskCluster

    cluster = DaskCluster.start(ClusterSpec(local_workers=2))
    security = cluster.security
    credentials = {
        "distributed.comm.tls.ca-file": security.tls_ca_file,
        "distributed.comm.tls.client.cert": security.tls_client_cert,
        "distributed.comm.tls.client.key": security.tls_client_key,
    }
    try:
        with dask.config.set(credentials):
            yield cluster
    finally:
        cluster.close()
