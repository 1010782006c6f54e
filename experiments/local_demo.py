"""In-process demo of encrypted k-NN on Iris through the client/server byte API.

The data owner builds and compiles the model (or loads it from the compile cache); the client gets
only the public model information and client specs, makes keys, encrypts held-out rows and decrypts
the answers. Per row it prints the decrypted class, the clear reference's class and the timings.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.neighbors import KNeighborsClassifier

from petlab.crypto.knn.deployment import (
    KnnClient,
    client_specs_bytes,
    parse_ciphertext,
    parse_evaluation_keys,
    run_encrypted,
)
from petlab.crypto.knn.families import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    classify_clear,
    encode_query,
)
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.quantization import MinMaxQuantizer
from petlab.server.knn.datasets import load_bundled
from petlab.server.knn.model_cache import load_or_compile


def run_demo(rows: int = 5, settings: KnnSettings | None = None, cache_dir: Path | None = None) -> int:
    settings = settings or KnnSettings()
    train, test = load_bundled("iris").split()
    print(
        f"[server] building the Iris model: n={settings.n} points kept, k={settings.k}, "
        f"{settings.bits}-bit features, {settings.algorithm} algorithm"
    )
    model = build_model(
        "iris", train.features, train.labels, settings, train.class_names, train.feature_names
    )
    compiled = load_or_compile(model, model.circuit_config(), cache_dir)
    origin = "loaded from cache" if compiled.from_cache else "compiled"
    print(
        f"[server] circuit {origin} (compilation took {compiled.compile_seconds:.1f} s); "
        f"{compiled.statistics['pbs_count']} programmable bootstraps per query"
    )

    info = model.public_info()
    client, evaluation_keys = _client_with_keys(compiled.server)
    quantizer = MinMaxQuantizer.from_dict(info["quantizer"])
    sklearn_knn = KNeighborsClassifier(n_neighbors=settings.k).fit(train.features, train.labels)

    header = (
        f"{'row':>4} {'true':>11} {'encrypted':>11} {'clear ref':>11} {'sklearn':>11} "
        f"{'encrypt':>8} {'server':>8} {'decrypt':>8} {'up/down bytes':>14}"
    )
    print(header)
    agree = 0
    for row in range(min(rows, len(test.labels))):
        levels = quantizer.transform(test.features[row])
        t0 = time.perf_counter()
        query = client.encrypt(encode_query(model.algorithm, levels, model.plan.bits))
        t1 = time.perf_counter()
        result = run_encrypted(compiled.server, evaluation_keys, parse_ciphertext(query))
        t2 = time.perf_counter()
        predicted = client.decrypt_class(result)
        t3 = time.perf_counter()
        reference = int(classify_clear(model.plan, levels)[0])
        plain = int(sklearn_knn.predict(test.features[row : row + 1])[0])
        agree += predicted == reference
        names = info["class_names"]
        print(
            f"{row:>4} {names[test.labels[row]]:>11} {names[predicted]:>11} {names[reference]:>11} "
            f"{names[plain]:>11} {t1 - t0:>7.3f}s {t2 - t1:>7.2f}s {t3 - t2:>7.3f}s "
            f"{len(query):>6}/{len(result):<7}"
        )
    reference_accuracy = float(
        np.mean(classify_clear(model.plan, quantizer.transform(test.features)) == test.labels)
    )
    print(
        f"encrypted == clear reference on {agree}/{min(rows, len(test.labels))} rows; clear-reference "
        f"accuracy on all {len(test.labels)} held-out rows: {reference_accuracy:.3f}"
    )
    compiled.server.cleanup()
    return 0 if agree == min(rows, len(test.labels)) else 1


def _client_with_keys(server) -> tuple[KnnClient, object]:
    """The device's side for ``server``'s circuit: a client with fresh keys, and its evaluation
    keys as the server reads them."""
    client = KnnClient(client_specs_bytes(server))
    started = time.perf_counter()
    client.generate_keys()
    keygen_seconds = time.perf_counter() - started
    evaluation_keys_bytes = client.evaluation_keys_bytes()
    print(
        f"[client] keys generated in {keygen_seconds:.1f} s; evaluation keys "
        f"{len(evaluation_keys_bytes) / 1e6:.1f} MB (uploaded once)"
    )
    return client, parse_evaluation_keys(evaluation_keys_bytes)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=5, help="held-out rows to classify")
    parser.add_argument("--n", type=int, default=40, help="training points kept")
    parser.add_argument("--k", type=int, default=3, help="neighbours")
    parser.add_argument("--algorithm", choices=ALGORITHMS, default=DEFAULT_ALGORITHM, help="circuit family")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="compile cache (else ~/.cache/petlab/models) [env PETLAB_CACHE_DIR]",
    )


def run(args: argparse.Namespace) -> int:
    return run_demo(args.rows, KnnSettings(n=args.n, k=args.k, algorithm=args.algorithm), args.cache_dir)
