"""A k-NN circuit cut into stages: one concrete-python *module*, one key set, a static graph.

A family that can be split (``KnnFamily.split``) describes its algorithm as a :class:`SplitProgram`:

* **stages**: the module's functions, each a traced body over encrypted arrays with a numpy
  *twin* computing the same integers. The training set is cut into P partitions
  (:func:`partitions`, public: it depends on n and P only); a partition's stages hold only its
  points' constants.
* **graph**: nodes, in topological order, each running one stage on the client's query
  (:data:`QUERY`) or on other nodes' outputs, optionally pinned to a partition (the worker that
  holds it). The last node's output is the encrypted class. Everything runs on the server: the
  client sends one ciphertext and decrypts one class, as for a whole circuit.

From the program this module derives everything else, so a family writes only its stages:

* the composition policy: each graph edge u -> (v, i) is ``fhe.Wire(Output(u's stage, 0),
  Input(v's stage, i))``. The graph has no cycle (a merge tree uses one stage per level), so no
  output needs ``fhe.refresh``: concrete propagates the noise of a wired output into the stage that
  reads it (measured: the module decrypts right without refresh; refresh costs one PBS per output
  value and about twice the key size);
* the input sets: the twins run over the graph on the family's client input set, so every stage is
  compiled for the values it really receives, plus any extra samples a stage asks for;
* the clear reference of the split algorithm (:func:`classify_clear`: the same graph over the
  twins) and the encrypted run (:func:`run_graph` with ``server.run``), through one executor;
* a check that the client's one query ciphertext fits every stage that reads it
  (:func:`check_query_inputs`: same key, encoding and shape in the client specs).

concrete-python 2.11 facts this relies on (checked by its tests): ``fhe.Wired`` compositions compile
with the "multi" parameter strategy ("mono" found no parameters for the fast family's module);
``Value.serialize`` of one function's output deserialises in another process as another
function's input under the same evaluation keys.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from concrete import fhe
from concrete.fhe.compilation import FunctionDef, ModuleCompiler

from petlab.crypto.knn.config import CircuitConfig

QUERY = "query"  # a node input that is the client's ciphertext
ENTRY_STAGE = "partition_0"  # the stage the client encrypts its query for
ANSWER_STAGE = "finish"  # the stage whose output the client decrypts


@dataclass(frozen=True)
class Stage:
    """One function of the module. ``body(*encrypted)`` is traced by concrete and returns one
    encrypted array; ``twin(*arrays)`` computes the same integers in numpy for one query.
    ``extra_inputs``: samples (tuples, one value per parameter) added to the input set beyond
    those the graph produces, to cover a parameter's whole range."""

    name: str
    params: tuple[str, ...]
    body: Callable[..., Any]
    twin: Callable[..., Any]
    extra_inputs: tuple[tuple, ...] = ()


@dataclass(frozen=True)
class Node:
    """One step of an evaluation: ``stage`` applied to ``inputs`` (:data:`QUERY` or node names),
    on partition ``partition``'s worker (``None``: wherever the inputs are)."""

    name: str
    stage: str
    inputs: tuple[str, ...]
    partition: int | None = None


@dataclass(frozen=True)
class StageGraph:
    """The evaluation graph of a split model: what an evaluator needs (no tracer, no constant)."""

    parts: int
    nodes: tuple[Node, ...]  # topological order; the last is the answer

    @property
    def answer(self) -> Node:
        return self.nodes[-1]


@dataclass(frozen=True)
class SplitProgram:
    graph: StageGraph
    stages: tuple[Stage, ...]
    client_inputset: tuple[np.ndarray, ...]
    description: dict = field(default_factory=dict)  # public figures for the cost model

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)


def partitions(n: int, parts: int) -> list[np.ndarray]:
    """The training indices of each partition: round robin, ``i`` in partition ``i mod P``, so
    sizes differ by at most one. Public: it depends on n and P only, never on the data."""
    if not 1 <= parts <= n:
        raise ValueError(f"the number of partitions must be between 1 and n = {n}, got {parts}")
    return [np.arange(p, n, parts) for p in range(parts)]


def merge_tree_program(
    parts: int,
    partition: Callable[[int], tuple[Callable, Callable]],
    merge: tuple[Callable, Callable],
    finish: tuple[Callable, Callable],
    client_inputset: Sequence[np.ndarray],
    description: dict | None = None,
) -> SplitProgram:
    """A one-pass split: ``partition_p(x)`` on each partition's worker, a binary tree of
    ``merge(a, b)`` (associative), then ``finish(state)``. Each argument is a (body, twin) pair;
    ``partition(p)`` gives partition p's. One merge stage per tree level (``merge_1``,
    ``merge_2``, ...): wiring a stage to itself would be a cycle, which concrete composes only with
    a noise refresh per value; per level the wires form a DAG. With P not a power of two the odd
    state of a level is carried to the next one. The stages' bodies are traced once each."""
    stages, nodes = [], []
    for p in range(parts):
        body, twin = partition(p)
        stages.append(Stage(f"partition_{p}", ("x",), body, twin))
        nodes.append(Node(f"partition_{p}", f"partition_{p}", (QUERY,), partition=p))
    level, current = 1, [f"partition_{p}" for p in range(parts)]
    while len(current) > 1:
        stages.append(Stage(f"merge_{level}", ("a", "b"), *merge))
        following = []
        for i in range(0, len(current) - 1, 2):
            name = f"merge_{level}_{i // 2}"
            nodes.append(Node(name, f"merge_{level}", (current[i], current[i + 1])))
            following.append(name)
        current = following + current[len(current) - len(current) % 2 :]
        level += 1
    stages.append(Stage(ANSWER_STAGE, ("state",), *finish))
    nodes.append(Node(ANSWER_STAGE, ANSWER_STAGE, (current[0],)))
    return SplitProgram(
        StageGraph(parts, tuple(nodes)), tuple(stages), tuple(client_inputset), description or {}
    )


def merge_levels(parts: int) -> int:
    """Levels of :func:`merge_tree_program`'s tree over ``parts`` partitions: ceil(log2 P)."""
    return (parts - 1).bit_length()


def critical_path_pbs(per_stage: dict[str, int], graph: StageGraph) -> int:
    """PBS on the longest path of one query's graph, each node costing its stage's PBS: the
    latency in PBS when every partition has a worker of its own (P <= W) and the merges of one
    tree level run side by side."""
    longest: dict[str, int] = {}
    for node in graph.nodes:
        before = [longest[source] for source in node.inputs if source != QUERY]
        longest[node.name] = per_stage[node.stage] + max(before, default=0)
    return longest[graph.answer.name]


def check_program(program: SplitProgram) -> None:
    """``ValueError`` unless the graph is well formed: known stages, one input per parameter,
    inputs defined before use, unique node names, the query read by :data:`ENTRY_STAGE` and the
    answer given by :data:`ANSWER_STAGE`."""
    stages = {stage.name: stage for stage in program.stages}
    if len(stages) != len(program.stages):
        raise ValueError("stage names must be unique")
    seen: set[str] = set()
    for node in program.graph.nodes:
        if node.name in seen or node.name == QUERY:
            raise ValueError(f"node name {node.name!r} is used twice or reserved")
        stage = stages.get(node.stage)
        if stage is None:
            raise ValueError(f"node {node.name!r} runs an unknown stage {node.stage!r}")
        if len(node.inputs) != len(stage.params):
            raise ValueError(f"node {node.name!r} gives {len(node.inputs)} inputs to {len(stage.params)}")
        missing = [source for source in node.inputs if source != QUERY and source not in seen]
        if missing:
            raise ValueError(f"node {node.name!r} reads {missing[0]!r} before it is computed")
        seen.add(node.name)
    if program.graph.answer.stage != ANSWER_STAGE:
        raise ValueError(f"the last node must run {ANSWER_STAGE!r}")
    if not any(n.stage == ENTRY_STAGE and QUERY in n.inputs for n in program.graph.nodes):
        raise ValueError(f"stage {ENTRY_STAGE!r} must read the query")


def run_graph(graph: StageGraph, query: Any, run: Callable[[Node, list[Any]], Any]) -> dict[str, Any]:
    """Every node's output for one query, in graph order: ``run(node, inputs)`` evaluates one
    node (twins in the clear, ``server.run`` encrypted). The answer is ``[graph.answer.name]``."""
    values: dict[str, Any] = {QUERY: query}
    for node in graph.nodes:
        values[node.name] = run(node, [values[source] for source in node.inputs])
    return values


def classify_clear(program: SplitProgram, queries: np.ndarray) -> np.ndarray:
    """The clear reference of the split algorithm: the graph over the stages' twins, per query."""
    twins = {stage.name: stage.twin for stage in program.stages}
    answer = program.graph.answer.name
    return np.array(
        [
            int(run_graph(program.graph, query, lambda node, args: twins[node.stage](*args))[answer])
            for query in np.atleast_2d(np.asarray(queries, dtype=np.int64))
        ],
        dtype=np.int64,
    )


def inputsets(program: SplitProgram) -> dict[str, list]:
    """Each stage's compile input set: what the graph hands it on the client input set (the
    twins' values), plus its ``extra_inputs``."""
    twins = {stage.name: stage.twin for stage in program.stages}
    samples: dict[str, list] = {stage.name: [] for stage in program.stages}

    def record(node: Node, args: list) -> Any:
        samples[node.stage].append(args[0] if len(args) == 1 else tuple(args))
        return twins[node.stage](*args)

    for query in program.client_inputset:
        run_graph(program.graph, np.asarray(query, dtype=np.int64), record)
    for stage in program.stages:
        samples[stage.name] += [extra[0] if len(extra) == 1 else extra for extra in stage.extra_inputs]
    return samples


def wires(program: SplitProgram, functions: dict[str, FunctionDef]) -> set:
    """One ``fhe.Wire`` per graph edge between stages (the query's inputs are not wired)."""
    producer = {node.name: node.stage for node in program.graph.nodes}
    out = set()
    for node in program.graph.nodes:
        for position, source in enumerate(node.inputs):
            if source != QUERY:
                origin = fhe.Output(functions[producer[source]], 0)
                out.add(fhe.Wire(origin, fhe.Input(functions[node.stage], position)))
    return out


def _function(stage: Stage) -> FunctionDef:
    """The stage's body as a module function with the stage's name and parameter names (concrete
    reads both from the function; it calls it with keyword arguments)."""

    def body(**arguments: Any) -> Any:
        return stage.body(*(arguments[name] for name in stage.params))

    body.__name__ = stage.name
    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in stage.params]
    )
    return FunctionDef(body, {name: "encrypted" for name in stage.params})


def compile_program(
    program: SplitProgram, config: CircuitConfig, simulation: bool = False, execution: bool = True
) -> fhe.Module:
    """The module of every stage, wired by the graph, compiled on the derived input sets
    (``parameter_selection_strategy`` is forced to "multi": see the module docstring).
    ``ValueError`` when the query's ciphertext would not fit every stage that reads it."""
    check_program(program)
    functions = {stage.name: _function(stage) for stage in program.stages}
    compiler = ModuleCompiler(list(functions.values()), fhe.Wired(wires(program, functions)))
    configuration = config.concrete_configuration(simulation, execution).fork(
        parameter_selection_strategy="multi"
    )
    module = compiler.compile(inputsets(program), configuration)
    check_query_inputs(module.server.client_specs.serialize(), program.graph)
    return module


def check_query_inputs(specs: bytes, graph: StageGraph) -> None:
    """``ValueError`` unless every stage input that receives the client's query has the same key,
    encoding and shape as :data:`ENTRY_STAGE`'s (the client encrypts once, for that stage)."""
    circuits = {
        circuit["name"]: circuit
        for circuit in json.loads(fhe.ClientSpecs.deserialize(specs).program_info.serialize())["circuits"]
    }
    entry = _input_type(circuits, ENTRY_STAGE, 0)
    for node in graph.nodes:
        for position, source in enumerate(node.inputs):
            if source == QUERY and _input_type(circuits, node.stage, position) != entry:
                raise ValueError(
                    f"stage {node.stage} reads the query with another encoding than {ENTRY_STAGE}: "
                    "the client's one ciphertext would not fit it"
                )


def _input_type(circuits: dict, stage: str, position: int) -> str:
    gate = circuits[stage]["inputs"][position]
    ciphertext = gate["typeInfo"]["lweCiphertext"]
    fields = ("encryption", "encoding", "abstractShape", "concreteShape")
    described = {key: ciphertext.get(key) for key in fields}
    return json.dumps({**described, "shape": gate.get("rawInfo", {}).get("shape")}, sort_keys=True)


def graph_pbs(per_stage: dict[str, int], graph: StageGraph) -> int:
    """PBS of one query: every node's stage (a merge stage may run at several nodes of a level)."""
    return sum(per_stage[node.stage] for node in graph.nodes)


def module_statistics(module: fhe.Module | fhe.Server, stage_names: Sequence[str]) -> dict:
    """PBS per stage and in all, complexity, key sizes of a compiled module (or its server)."""
    if isinstance(module, fhe.Server):
        per_stage = {name: int(module.programmable_bootstrap_count(name)) for name in stage_names}
    else:
        functions = module.functions()
        per_stage = {name: int(functions[name].programmable_bootstrap_count) for name in stage_names}
    return {
        "pbs_count": sum(per_stage.values()),
        "pbs_per_stage": per_stage,
        "complexity": float(module.complexity),
        "bootstrap_key_bytes": int(module.size_of_bootstrap_keys),
        "keyswitch_key_bytes": int(module.size_of_keyswitch_keys),
    }
