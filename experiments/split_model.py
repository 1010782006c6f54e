"""The cost model of one query over many workers, fitted to ``split_bench`` rows,
checked on the rows it was not fitted on, and extrapolated to 16 machines and 10^5 points.

PBS (exact, from public figures: ``stage_pbs`` of each family's ``split`` module), k = 3
(S(3) = 2), n_p points per partition, P partitions, C classes:

* thermo (one pass; the default): partition_p = n_p (shift + 1) when its distance reduces + about
  2 n_p comparators (per-class lists) + C k refreshes; each of the ceil(log2 P) merge levels
  C (k + S) on the critical path; finish = its network + C k indicators (C (k - 1) when C <= k)
  + the vote. The whole circuit: n (shift + 1) + about 2 n + the counted indicators + the vote
  (``thermo.cost``).
* fast (two passes): with L_p distinct (feature, level) lookups in partition p (L_p <= d 2^bits)
  and c = 1 when the plan coarsens (d > 15 at 4 bits): partition_p = L_p + c n_p + about 8/3 n_p,
  count_p = L_p + c n_p + n_p, merge = merge_count(P, k), finish = C(C-1)/2 (vote_bits - 3) + C.
  The whole circuit: L + c n + comparator_count(n, k) + n + finish.

Time. The machine is shared while measured (load average in every row), so the model rests on CPU
seconds, which load inflates far less than wall time: ``CPU = c * PBS`` for the whole circuit in
process (c: CPU seconds per PBS, one per data set, since the lookups' widths depend on d), fitted
on the largest n and checked on the others; the split's CPU over all its workers against the same
c (``c_split / c`` is what splitting costs per PBS: Dask, serialisation, the module's parameters).
Wall latency is fitted too, ``T = h + t1 * PBS_critical`` on the cluster (h: four rounds of Dask
tasks and the stages' outputs), on the smallest and largest n, checked on the middle sizes.

Extrapolation: P = 16 machines like this one (2 cores), one worker each using both cores, at each
data set's whole training set and at 10^5 points of the same d, lookups per partition at their
bound d 2^bits and the largest class at the data set's share: ``T16 = h + c * PBS_critical / 2``
against one machine's ``c * PBS_whole / 2`` (both cores busy, as concrete keeps them on a quiet
machine: 1.59 s measured for 205 PBS at Iris n = 40 is 7.8 ms per PBS, 15.5 ms of CPU).
"""

from __future__ import annotations

import math

import numpy as np

from petlab.crypto.knn.fast.plan import choose_scale, default_distance_bits
from petlab.crypto.knn.fast.selection_network import comparator_count, k_smallest_count, merge_count
from petlab.experiments import markdown

K = 3
BITS = 4
SIGN_BITS = 4
MACHINES = 16
LARGE_N = 100_000


def class_shape(dataset: str) -> tuple[int, float]:
    """Number of classes and the largest class's share of the bundled data set."""
    from petlab.server.knn.datasets import load_bundled

    counts = np.bincount(load_bundled(dataset).labels)
    return len(counts), float(counts.max() / counts.sum())


def _finish(n_classes: int, largest_class: int) -> int:
    vote_bits = (largest_class + 1).bit_length() + 1  # signed width of votes_c' - votes_c - 1
    return n_classes * (n_classes - 1) // 2 * (max(0, vote_bits - SIGN_BITS) + 1) + n_classes


def predicted_pbs(algorithm: str, dataset: str, d: int, n: int, parts: int) -> tuple[int, int]:
    """(PBS on the critical path with ``parts`` workers, whole-circuit PBS) at n points of d
    features with the data set's class proportions (module docstring)."""
    if algorithm == "thermo":
        return _thermo_pbs(dataset, d, n, parts)
    n_classes, share = class_shape(dataset)
    coarse = int(choose_scale(d, BITS, default_distance_bits(d)).coarsened)
    lookups = d * (1 << BITS)  # every (feature, level) at large n
    finish = _finish(n_classes, math.ceil(share * n))
    n_p = math.ceil(n / parts)
    per_worker = 2 * (lookups + coarse * n_p) + k_smallest_count(n_p, K) + n_p
    whole = lookups + coarse * n + comparator_count(n, K) + n + finish
    return per_worker + merge_count(parts, K) + finish, whole


def _thermo_pbs(dataset: str, d: int, n: int, parts: int) -> tuple[int, int]:
    from petlab.crypto.knn.split.program import merge_levels
    from petlab.crypto.knn.thermo.cost import extrapolate, vote_lookups
    from petlab.crypto.knn.thermo.network import finish_program, merge_program, partition_program
    from petlab.crypto.knn.thermo.plan import counted_positions, spec_for
    from petlab.server.knn.datasets import load_bundled, owner_settings

    owner = owner_settings(dataset)
    spec = spec_for(d, owner.bits, owner.distance)
    sizes = np.bincount(load_bundled(dataset).labels).tolist()
    n_classes, n_p = len(sizes), math.ceil(n / parts)
    shares = np.asarray(sizes, dtype=np.float64) / sum(sizes)
    part_sizes = np.maximum(np.round(shares * n_p).astype(int), 0)
    labels = np.repeat(np.arange(n_classes), part_sizes)
    reduction = n_p * (spec.shift + 1) if spec.reduced else 0
    partition = reduction + partition_program(labels, n_classes, owner.k).comparators + n_classes * owner.k
    merges = merge_levels(parts) * merge_program(n_classes, owner.k).comparators
    indicators = n_classes * len(counted_positions(n_classes, owner.k))
    finish = finish_program(n_classes, owner.k).comparators + indicators + vote_lookups(n_classes)
    return partition + merges + finish, extrapolate(sizes, n, owner.k, spec).total


def _fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    (x0, y0), (x1, y1) = points[0], points[-1]
    if x1 == x0:
        return 0.0, y1 / x1
    slope = (y1 - y0) / (x1 - x0)
    return y0 - slope * x0, slope


def report(rows: list[dict]) -> str:
    """The split benchmark's Markdown: the measured table, the time model fitted per family and
    data set, and the extrapolation to :data:`MACHINES` machines."""
    from petlab.experiments.machine import describe

    lines = [
        "# One query over many workers: measured cost and extrapolation",
        "",
        f"Machine: {describe()}. Load average per row in the table: compare rows of one run.",
        "Command: `petlab-experiments split-bench` (the family in the first column; thermo with the data "
        "owner's settings, fast with k = 3 and 4-bit features).",
        "",
    ]
    header = ["family", "data set (d)", "n (kept)", "configuration", "PBS (model)", "PBS critical path"]
    header += ["compile s", "eval keys MB", "up + down B", "between stages B", "median s", "CPU s / query"]
    header += ["load", "correct"]
    cells = [
        [
            r["algorithm"],
            f"{r['dataset']} ({r['d']})",
            f"{r['n']} ({r['n_kept']})",
            r["config"],
            f"{r['pbs']} ({r['pbs_model']})",
            r["pbs_critical"],
            r["compile_s"],
            f"{r['eval_key_bytes'] / 1e6:.1f}",
            f"{r['query_bytes']} + {r['result_bytes']}",
            f"{r['stage_bytes']:,}",
            f"{r['median_s']:.2f}",
            f"{r['cpu_s_per_query']:.2f}",
            r["load"],
            r["correct"],
        ]
        for r in rows
    ]
    lines.append(markdown.table(header, cells))
    exact = all(r["pbs"] == r["pbs_model"] for r in rows)
    lines += [
        "",
        "PBS model (module docstring) against the compiled counts: "
        + ("exact on every row." if exact else "OFF on some rows."),
        "",
        "## Time model (module docstring)",
        "",
    ]
    model_lines, fits = _time_model(rows)
    lines += model_lines
    lines += _extrapolation(fits)
    lines += [
        "",
        "Assumptions to check on a real cluster: the CPU per PBS c stays what it is at the largest n "
        "measured (more PBS at 10^5 points are counted above, not a higher cost per PBS); a machine "
        "keeps both cores busy within one stage, as concrete does for one evaluation; compiling a "
        "module of P + ceil(log2 P) + 1 stages (thermo; fast: 2P + 2) at 6,250 points per partition "
        "is not measured here; every worker holds every client's evaluation keys of the module (the "
        "'eval keys' column), since every worker runs stages of every query.",
        "",
    ]
    return "\n".join(lines)


def _time_model(rows: list[dict]) -> tuple[list[str], dict[tuple[str, str], dict]]:
    """Per (family, data set): c (CPU per PBS, whole circuit), h and t1 (wall on the cluster
    against critical-path PBS), with the rows that check them."""
    lines: list[str] = []
    fits: dict[tuple[str, str], dict] = {}
    for algorithm, dataset in dict.fromkeys((r["algorithm"], r["dataset"]) for r in rows):
        own = [r for r in rows if (r["algorithm"], r["dataset"]) == (algorithm, dataset)]
        whole = sorted((r["pbs"], r["cpu_s_per_query"], r["median_s"]) for r in own if r["parts"] == 1)
        split = sorted(
            (r["pbs"], r["pbs_critical"], r["cpu_s_per_query"], r["median_s"])
            for r in own
            if "LocalCluster" in r["config"]
        )
        if not whole or not split:
            continue
        c = whole[-1][1] / whole[-1][0]
        c_split = split[-1][2] / split[-1][0]
        h, t1 = _fit_line([(critical, wall) for _, critical, _, wall in split])
        h = max(h, 0.0)
        fits[algorithm, dataset] = {
            "c": c,
            "h": h,
            "d": own[0]["d"],
            "n_train": max(r["n_kept"] for r in own),
        }
        lines.append(
            f"- {algorithm}, {dataset}: c = {c * 1e3:.1f} ms CPU per PBS (whole, in process); the split "
            "on the cluster "
            f"{c_split * 1e3:.1f} ms CPU per PBS ({c_split / c:.2f}x); wall on LocalCluster: h = {h:.2f} s "
            f"+ t1 = {t1 * 1e3:.1f} ms per critical-path PBS."
        )
        for pbs, cpu, _ in whole[:-1]:
            lines.append(f"  - check, whole, {pbs} PBS: CPU predicted {c * pbs:.2f} s, measured {cpu:.2f} s")
        for _, critical, _, wall in split[1:-1]:
            lines.append(
                f"  - check, LocalCluster, {critical} critical PBS: wall predicted "
                f"{h + t1 * critical:.2f} s, measured {wall:.2f} s"
            )
    return lines, fits


def _extrapolation(fits: dict[tuple[str, str], dict]) -> list[str]:
    lines: list[str] = []
    lines += [
        "",
        f"## Extrapolation: {MACHINES} machines like this one, one worker each (both cores)",
        "",
        "Lookups per partition at their bound d 2^bits, largest class at the data set's share;"
        f" T{MACHINES} = h + c x PBS_critical / 2, one machine c x PBS_whole / 2.",
        "",
    ]
    cells = []
    for (algorithm, dataset), fit in fits.items():
        for n in (fit["n_train"], LARGE_N):
            critical, whole_pbs = predicted_pbs(algorithm, dataset, fit["d"], n, MACHINES)
            one, spread = fit["c"] * whole_pbs / 2, fit["h"] + fit["c"] * critical / 2
            cells.append(
                [
                    algorithm,
                    f"{dataset} ({fit['d']})",
                    f"{n:,}",
                    f"{whole_pbs:,}",
                    f"{one:,.0f}",
                    f"{critical:,}",
                    f"{spread:,.1f}",
                    f"{one / spread:.1f}x",
                ]
            )
    header = [
        "family",
        "data set (d)",
        "n",
        "PBS whole",
        "one machine (s)",
        f"PBS critical, {MACHINES} workers",
    ]
    header += [f"{MACHINES} machines (s)", "speed-up"]
    lines.append(markdown.table(header, cells))
    return lines
