"""CPU utilisation of one encrypted k-NN evaluation: process CPU time (user + system, every
thread) over wall time while ``circuit.run`` evaluates queries, with concrete's parallel options.

On a 2-core machine a utilisation near 2 means both cores work for the query; the figure is capped
by what other processes leave free, so compare the options of one run only (they are interleaved
query by query). Options: concrete's default (loop parallelisation), one thread
(``loop_parallelize=False``) and dataflow (``dataflow_parallelize=True``, loops off), all at the
family's ``global_p_error`` and strategy::

    python -m petlab.experiments.knn_cpu --dataset wine --queries 3
"""

from __future__ import annotations

import argparse
import os
import time

import pandas as pd
from concrete import fhe

from petlab.crypto.knn.families import classify_clear, default_config
from petlab.crypto.knn.thermo.circuit import circuit_function, compile_inputset
from petlab.experiments import markdown
from petlab.experiments.knn_stages import owner_model
from petlab.server.knn.datasets import BUNDLED, load_bundled

OPTIONS: dict[str, dict[str, bool]] = {
    "default": {},
    "one_thread": {"loop_parallelize": False},
    "dataflow": {"dataflow_parallelize": True, "loop_parallelize": False},
}


def measure(dataset: str, queries: int, options: tuple[str, ...]) -> list[dict]:
    _, test = load_bundled(dataset).split()
    model = owner_model(dataset)
    levels = model.quantizer.transform(test.features)[:queries]
    expected = classify_clear(model.plan, levels)
    base = default_config("thermo").concrete_configuration()  # the owner settings are thermo
    circuits = {}
    for name in options:
        compiler = fhe.Compiler(circuit_function(model.plan), {"code": "encrypted"})
        circuits[name] = compiler.compile(compile_inputset(model.plan), base.fork(**OPTIONS[name]))
        circuits[name].keygen()
        circuits[name].encrypt_run_decrypt(model.encode(levels[0]))  # warm-up
    totals = {name: [0.0, 0.0] for name in options}
    for query, want in zip(levels, expected, strict=True):
        for name, circuit in circuits.items():
            encrypted = circuit.encrypt(model.encode(query))
            cpu, wall = time.process_time(), time.perf_counter()
            result = circuit.run(encrypted)
            totals[name][0] += time.process_time() - cpu
            totals[name][1] += time.perf_counter() - wall
            if int(circuit.decrypt(result)) != int(want):
                raise AssertionError(f"{name}: the encrypted class differs from the clear reference")
    load = os.getloadavg()[0]
    return [
        {
            "dataset": dataset,
            "n": model.plan.n,
            "option": name,
            "pbs": circuits[name].programmable_bootstrap_count,
            "wall_s_per_query": round(wall / queries, 3),
            "cpu_over_wall": round(cpu / wall, 2),
            "load_average": round(load, 2),
        }
        for name, (cpu, wall) in totals.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=list(BUNDLED), default="wine")
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--options", nargs="+", choices=list(OPTIONS), default=list(OPTIONS))
    args = parser.parse_args(argv)
    rows = measure(args.dataset, args.queries, tuple(args.options))
    print(markdown.frame_table(pd.DataFrame(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
