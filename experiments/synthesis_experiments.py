"""Synthesis utility against privacy parameters.

* OnTheMap (Abowd, Gehrke and Vilhuber 2009, Figures 2-3): root average IMSE of the tract-to-tract
  table against eps (delta = 1e-6) and against p_min, the smallest probability of keeping an empty
  origin block (Algorithm 2's f_d), on generated commute data; "tracts" are public 4-mile grid cells.
  Average commute distance per destination, synthetic against true (ICDE 2008, Figures 1-4).
* Adaptive histograms ("Synthetic Data via Differential Privacy", Figure 5): the multi-scale
  earthmover approximation between real and synthetic commutes (points of [0, 1]^4) against depth,
  for eps 0.1, 1 and 10 (improved histogram, 2 eps, plus eps for the leaf counts).
* Plausible deniability (VLDB 2017, Figures 3-4, Tables 3 and 5): mean TVD of 1- and 2-way
  marginals, classifier accuracy and agreement on income, and the distinguishing game, for reals,
  marginals and synthetics at several omega.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from petlab.plaindata.adaptive.hierarchies import Quadtree
from petlab.plaindata.adaptive.histograms import (
    default_threshold,
    improved_cost,
    improved_histogram,
    leaf_measurement_cost,
    measure_leaves,
    synthesize_from_counts,
)
from petlab.plaindata.dp.composition import sequential
from petlab.plaindata.dp.noise import SeededNoise
from petlab.plaindata.dp.privacy_cost import PrivacyCost
from petlab.plaindata.metrics.classifiers import classifier_comparison, distinguishing_accuracy
from petlab.plaindata.metrics.commute import (
    average_commute_by_destination,
    earthmover_approximation,
    root_average_imse,
    to_unit_cube,
)
from petlab.plaindata.metrics.tabular import all_marginal_tvds
from petlab.plaindata.onthemap.block_grid import BlockGrid
from petlab.plaindata.onthemap.commute_data import generate
from petlab.plaindata.onthemap.release import DistanceBands, release
from petlab.plaindata.plausible.statement import abstention, release_cost, run_cost
from petlab.plaindata.plausible.synthesis import (
    PlausibleConfig,
    fit,
    fit_marginals,
    sample_marginals,
)
from petlab.plaindata.plausible.synthesis import release as plausible_release
from petlab.plaindata.plausible.tabular_schema import acs_discretization, acs_domains_path, load_domains

DEFAULT_KEEP = DistanceBands().keep
MIN_RECORDS = 100  # fewer released synthetics than this: no utility figures for that set


def commute_table(workers: int, seed: int):
    data = generate(workers, seed)
    blocks = pd.Index(data.crosswalk.tabblk2010)
    lat = data.crosswalk.blklatdd.to_numpy(float)
    lon = data.crosswalk.blklondd.to_numpy(float)
    destination = blocks.get_indexer(data.od.w_geocode)
    origin = blocks.get_indexer(data.od.h_geocode)
    return destination, origin, data.od.S000.to_numpy(), lat, lon


def tracts(lat: np.ndarray, lon: np.ndarray, miles: float = 4.0) -> np.ndarray:
    y = np.floor((lat - lat.min()) * 69.0 / miles).astype(np.int64)
    x = np.floor((lon - lon.min()) * 69.0 * np.cos(np.radians(lat.mean())) / miles).astype(np.int64)
    return y * (x.max() + 1) + x


def onthemap_experiments(workers: int, seed: int, epsilons, p_mins, progress=None):
    destination, origin, count, lat, lon = commute_table(workers, seed)
    grid = BlockGrid.build(lat, lon)
    part = tracts(lat, lon)
    truth = (destination, origin, count)
    rows, commute = [], None
    settings = [("eps", e, DEFAULT_KEEP[-1]) for e in epsilons] + [("p_min", 4.6, p) for p in p_mins]
    for sweep, eps, p_min in settings:
        keep = (*(max(k, p_min) for k in DEFAULT_KEEP[:-1]), p_min)
        result = release(*truth, grid, eps, 1e-6, DistanceBands(keep=keep), rng=np.random.default_rng(seed))
        imse = root_average_imse(truth, (result.destination, result.origin, result.count), part)
        row = {
            "sweep": sweep,
            "eps": eps,
            "delta": 1e-6,
            "p_min": p_min,
            "eps_prime": result.privacy.epsilon,
        }
        for _, r in imse.iterrows():
            row[f"imse_{r['class']}"] = r["root_average_imse"]
        rows.append(row)
        if sweep == "eps" and eps == 4.6:
            real = average_commute_by_destination(destination, origin, count, lat, lon)
            synthetic = average_commute_by_destination(
                result.destination, result.origin, result.count, lat, lon
            )
            commute = pd.DataFrame({"true_miles": real, "synthetic_miles": synthetic}).dropna()
        if progress is not None:
            progress.update()
    return pd.DataFrame(rows), commute


def commute_points(workers: int, seed: int) -> np.ndarray:
    """Workers as points of [0, 1]^4: home latitude and longitude, work latitude and longitude
    (Section 5.1 of "Synthetic Data via Differential Privacy")."""
    destination, origin, count, lat, lon = commute_table(workers, seed)
    low, high = np.array([lat.min(), lon.min()]), np.array([lat.max(), lon.max()])
    unit = to_unit_cube(np.column_stack([lat, lon]), low, high)
    return np.hstack([unit[np.repeat(origin, count)], unit[np.repeat(destination, count)]])


def adaptive_experiments(workers: int, seed: int, epsilons, max_depth: int, progress=None) -> pd.DataFrame:
    points = commute_points(workers, seed)
    rows = []
    for eps in epsilons:
        noise, rng = SeededNoise(seed), np.random.default_rng(seed)
        domain = Quadtree(4)
        tree = improved_histogram(points, domain, eps, default_threshold(eps, domain.branching), noise=noise)
        synthetic = synthesize_from_counts(domain, measure_leaves(points, domain, tree, eps, noise), rng)
        emd = earthmover_approximation(points, synthetic, max_depth) / len(points)
        total = sequential([improved_cost(eps), leaf_measurement_cost(eps)])  # the release's cost
        for depth, value in enumerate(emd):
            rows.append(
                {
                    "eps": eps,
                    "total_eps": total.epsilon,
                    "depth": depth,
                    "earthmover_per_point": value,
                    "synthetic_points": len(synthetic),
                    "real_points": len(points),
                }
            )
        if progress is not None:
            progress.update()
    return pd.DataFrame(rows)


def plausible_experiments(frame: pd.DataFrame, omegas, seed: int, per_class: int, k: int = 50, progress=None):
    """Reals (a disjoint training sample), marginals and synthetics, against held-out reals."""
    schema = load_domains(acs_domains_path())
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(frame))
    test = frame.iloc[order[: len(frame) // 5]]
    data = frame.iloc[order[len(frame) // 5 :]]
    codes = schema.encode(data)
    size = min(len(data) // 2, 20_000)
    sets = {"reals": data.iloc[:size]}
    config = PlausibleConfig(k=k, omega=omegas[0])
    sets["marginals"] = schema.decode(
        sample_marginals(fit_marginals(codes, schema.cardinalities, config, rng), size, rng)
    )[list(frame.columns)]
    rates = {"reals": 1.0, "marginals": 1.0}
    costs: dict[str, tuple[PrivacyCost | None, PrivacyCost | None]] = {}
    for omega in omegas:
        config = PlausibleConfig(k=k, omega=omega)
        fitted = fit(codes, schema.cardinalities, acs_discretization(schema), config, rng)
        run = plausible_release(fitted, size, config, abstention(config), rng)  # L = size runs, public
        sets[f"omega={omega}"] = schema.decode(run.records)[list(frame.columns)]
        rates[f"omega={omega}"] = run.pass_rate
        costs[f"omega={omega}"] = (run_cost(config), release_cost(fitted, config, size))
        if progress is not None:
            progress.update()
    reference = frame.iloc[order[len(frame) // 5 :]].iloc[size : 2 * size]  # other reals, for TVD
    usable = {label: records for label, records in sets.items() if len(records) >= MIN_RECORDS}
    scores = classifier_comparison(usable, test, "incc", seed=seed)
    rows = []
    for label, records in sets.items():
        row = {"data": label, "records": len(records), "pass_rate": rates[label]}
        if label in costs:  # Theorem 1 for one run (the paper's per-record figure), and the release's
            one, whole = costs[label]
            row["runs"] = size
            for name, cost in (("per_record", one), ("whole_release", whole)):
                row[f"{name}_epsilon"] = None if cost is None else cost.epsilon
                row[f"{name}_delta"] = None if cost is None else cost.delta
        if label in usable:  # a strict test can pass too few candidates to measure anything
            row["tvd_1way"] = np.mean(list(all_marginal_tvds(reference, records, 1).values()))
            row["tvd_2way"] = np.mean(list(all_marginal_tvds(reference, records, 2).values()))
            for s in scores:
                if s.data == label:
                    row[f"accuracy_{s.classifier}"] = s.accuracy
                    row[f"agreement_{s.classifier}"] = s.agreement
            real, other = (data.iloc[:size], reference) if label == "reals" else (sets["reals"], records)
            games = min(per_class, len(other) * 2 // 3)
            for classifier in ("rf", "tree"):
                row[f"distinguish_{classifier}"] = distinguishing_accuracy(
                    real, other, classifier, games, seed
                )
        rows.append(row)
        if progress is not None:
            progress.update()
    return pd.DataFrame(rows)
