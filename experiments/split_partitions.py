"""A split query measured per partition: each node of the stage graph evaluated alone with real
keys, then the latency a cluster of P workers would see.

For each P, the owner model of a data set (split 0's training rows, the owner's settings and error
budget) is compiled as a split module (``crypto.knn.split``), keyed, warmed up with one untimed
query, and one query is run node by node in this process, each node timed on its own. With one
worker per partition and the merges of a tree level side by side, the latency is the longest
path through the graph of those node times (no network: the bytes each node hands on are weighed
beside it, what Dask would move between workers). The answer is checked against the clear
reference, and the cost model's critical path in PBS is reported beside the measured one.

    python -m petlab.experiments.split_partitions --dataset breast_cancer --parts 16 4 2 8 \\
        --out results/split_partitions_breast_cancer.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from dataclasses import replace
from pathlib import Path

from petlab.crypto.knn.deployment import (
    KnnClient,
    client_specs_bytes,
    parse_ciphertext,
    parse_evaluation_keys,
    run_stage,
)
from petlab.crypto.knn.families import classify_clear, split_program
from petlab.crypto.knn.model import build_model
from petlab.crypto.knn.split.program import (
    QUERY,
    compile_program,
    critical_path_pbs,
    module_statistics,
    run_graph,
)
from petlab.experiments import markdown
from petlab.server.knn.datasets import BUNDLED, bundled_public_bounds, load_bundled, owner_settings

COLUMNS = [
    "dataset",
    "parts",
    "global_p_error",
    "nodes",
    "pbs_critical_model",
    "pbs_critical",
    "slowest_partition_s",
    "merges_s",
    "critical_path_s",
    "sum_of_nodes_s",
    "bytes_between_nodes",
    "equals_clear",
    "load_average",
]


def measure(name: str, parts: int, budget: float | None) -> dict:
    train, test = load_bundled(name).split(seed=0)
    settings = (
        owner_settings(name) if budget is None else replace(owner_settings(name), global_p_error=budget)
    )
    model = build_model(
        name, train.features, train.labels, settings, public_bounds=bundled_public_bounds(name)
    )
    config = model.circuit_config()
    program = split_program(model.plan, parts, config)
    module = compile_program(program, config)
    names = [stage.name for stage in program.stages]
    per_stage = module_statistics(module, names)["pbs_per_stage"]
    client = KnnClient(client_specs_bytes(module.server))
    client.generate_keys()
    keys = parse_evaluation_keys(client.evaluation_keys_bytes())
    levels = model.quantizer.transform(test.features[:2])
    ciphertexts = [client.encrypt(model.encode(q)) for q in levels]
    graph = program.graph

    def timed_run(times: dict, sizes: dict):
        def run(node, inputs):
            started = time.perf_counter()
            value = run_stage(module.server, keys, node.stage, inputs)
            times[node.name] = time.perf_counter() - started
            sizes[node.name] = len(value.serialize())
            return value

        return run

    run_graph(graph, parse_ciphertext(ciphertexts[0]), timed_run({}, {}))  # prepares the keys
    times: dict[str, float] = {}
    sizes: dict[str, int] = {}
    values = run_graph(graph, parse_ciphertext(ciphertexts[1]), timed_run(times, sizes))
    answer = client.decrypt_class(values[graph.answer.name].serialize())
    longest: dict[str, float] = {}
    for node in graph.nodes:
        before = [longest[source] for source in node.inputs if source != QUERY]
        longest[node.name] = times[node.name] + max(before, default=0.0)
    partitions = [node for node in graph.nodes if node.inputs == (QUERY,)]
    slowest = max(times[node.name] for node in partitions)
    return {
        "dataset": name,
        "parts": parts,
        "global_p_error": model.global_p_error,
        "nodes": len(graph.nodes),
        "pbs_critical_model": critical_path_pbs(program.description["stage_pbs"], graph),
        "pbs_critical": critical_path_pbs(per_stage, graph),
        "slowest_partition_s": round(slowest, 3),
        "merges_s": round(longest[graph.answer.name] - slowest, 3),
        "critical_path_s": round(longest[graph.answer.name], 3),
        "sum_of_nodes_s": round(sum(times.values()), 3),
        "bytes_between_nodes": sum(size for node, size in sizes.items() if node != graph.answer.name),
        "equals_clear": answer == int(classify_clear(model.plan, levels[1:2])[0]),
        "load_average": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", choices=sorted(BUNDLED), default="breast_cancer", help="data set")
    parser.add_argument("--parts", nargs="+", type=int, default=[16, 4, 2, 8], help="partitions P")
    parser.add_argument("--global-p-error", type=float, default=None, help="default: the owner settings'")
    parser.add_argument("--out", type=Path, default=Path("results/split_partitions.csv"), help="the CSV")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for parts in args.parts:
            rows.append(measure(args.dataset, parts, args.global_p_error))
            writer.writerow(rows[-1])
            handle.flush()
            print(rows[-1], flush=True)
    table = markdown.table(COLUMNS, [[str(row[c]) for c in COLUMNS] for row in rows])
    args.out.with_suffix(".md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
