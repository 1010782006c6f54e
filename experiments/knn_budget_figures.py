"""Seconds against agreement and accuracy, per data set, and the owner settings' summary table.

Joins three measurements of the same variants (an error budget and a rounding,
``KnnSettings.global_p_error`` and ``KnnSettings.rounding``) of each bundled data set's owner model:

- real-key seconds per query on a quiet machine, the variants interleaved row by row
  (``experiments/knn_budget_seconds.py``; its CSVs, ``--seconds``);
- agreement with the exact clear reference and accuracy over the splits, in concrete's simulation
  with its lookup errors (``experiments/knn_budget.py``; ``--budget``);
- evaluation key bytes as uploaded (``knn_budget_seconds --keys-only``; ``--keys``).

It writes one figure per data set, ``knn_budget_<data set>.png``: seconds per query (x) against
agreement and against accuracy less float k-NN's on the same splits (y; the variants may have
been simulated over different numbers of splits), each variant a labelled point, the bar's lines
beside them (99.5 % agreement; one point below float k-NN); and ``knn_speed_summary.md``: each
data set's owner setting (``server.knn.datasets.owner_settings``) with its seconds, cost, keys,
answers and target.

    python -m petlab.experiments.knn_budget_figures \\
        --seconds results/knn_budget_seconds_*_quiet.csv --budget results/knn_budget.csv \\
        --keys results/knn_budget_keys.csv --out results
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from petlab.experiments import markdown
from petlab.experiments.knn_budget import MIN_AGREEMENT, read_rows, summarize
from petlab.server.knn.datasets import BUNDLED, owner_settings

BASELINE = (1e-4, "exact")
# seconds per query on 2 quiet cores at the owner setting, and upload bytes of its keys (public
# targets of the k-NN speed work; Iris and wine: no slower than the baseline budget in the same run)
TARGET_SECONDS = {"breast_cancer": 20.0, "digits": 90.0}
TARGET_KEY_BYTES = {"digits": 150e6}


def label(variant: tuple[float, str]) -> str:
    budget, rounding = variant
    return f"{budget:g}" + (" approx." if rounding == "approximate" else "")


def seconds_table(paths: list[Path]) -> pd.DataFrame:
    """Per (data set, budget, rounding): median seconds, queries, the median per-row ratio of the
    baseline's seconds to these (the baseline run in the same file), and answers equal to the clear
    reference."""
    rows = []
    for path in paths:
        frame = pd.read_csv(path)
        frame["equals_clear"] = frame["equals_clear"].astype(str) == "True"
        for name, mine in frame.groupby("dataset", sort=False):
            base = mine[(mine.global_p_error == BASELINE[0]) & (mine.rounding == BASELINE[1])]
            base_by_row = dict(zip(base.row, base.seconds, strict=True))
            for (budget, rounding), these in mine.groupby(["global_p_error", "rounding"], sort=False):
                ratios = [
                    base_by_row[r] / s
                    for r, s in zip(these.row, these.seconds, strict=True)
                    if r in base_by_row
                ]
                rows.append(
                    {
                        "dataset": name,
                        "global_p_error": float(budget),
                        "rounding": rounding,
                        "queries": len(these),
                        "seconds": float(np.median(these.seconds)),
                        "ratio": float(np.median(ratios)) if ratios else float("nan"),
                        "equal": int(these.equals_clear.sum()),
                        "load": f"{these.load_average.min():.1f}-{these.load_average.max():.1f}",
                    }
                )
    return pd.DataFrame(rows)


def figure(name: str, seconds: pd.DataFrame, summary: list[dict], out: Path) -> Path | None:
    """``out``/knn_budget_<name>.png, or None when no variant has both seconds and answers."""
    points = []
    for entry in summary:
        if entry["dataset"] != name:
            continue
        match = seconds[
            (seconds.dataset == name)
            & np.isclose(seconds.global_p_error, entry["global_p_error"])
            & (seconds.rounding == entry["rounding"])
        ]
        if len(match):
            points.append((float(match.seconds.iloc[0]), entry))
    if not points:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), sharex=True)
    gaps = []
    points.sort(key=lambda point: point[0])
    for index, (x, entry) in enumerate(points):
        variant = (entry["global_p_error"], entry["rounding"])
        marker = "s" if entry["rounding"] == "approximate" else "o"
        gap = 100 * (entry["accuracy"] - entry["float_knn"])
        gaps.append(gap)
        left.plot(x, 100 * entry["agreement"], marker, color="C0")
        right.plot(x, gap, marker, color="C1")
        text = f"{label(variant)} ({entry['splits']} splits)"
        offset = (4, 8 - 11 * (index % 3))  # neighbours' labels at three heights
        for axis, y in ((left, 100 * entry["agreement"]), (right, gap)):
            axis.annotate(text, (x, y), textcoords="offset points", xytext=offset, fontsize=7)
    left.axhline(100 * MIN_AGREEMENT, color="grey", linestyle="--", linewidth=0.8, label="99.5 % (the bar)")
    right.axhline(0, color="black", linewidth=0.8, label="float k-NN")
    right.axhline(-1, color="grey", linestyle="--", linewidth=0.8, label="one point below (the bar)")
    left.set_ylim(min(99.0, min(100 * e["agreement"] for _, e in points) - 0.2), 100.2)
    right.set_ylim(min([*gaps, -1]) - 0.5, max([*gaps, 0]) + 0.5)
    left.set_ylabel("agreement with the exact clear reference (%)")
    right.set_ylabel("accuracy - float k-NN, same splits (points)")
    for axis in (left, right):
        axis.set_xlabel("seconds per query, real keys, 2 quiet cores")
        axis.set_xlim(0, 1.15 * max(x for x, _ in points))
        axis.legend(fontsize=7, loc="lower right")
        axis.grid(alpha=0.3)
    fig.suptitle(f"{name}: seconds per query against simulated answers", fontsize=10)
    fig.tight_layout()
    path = out / f"knn_budget_{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _of(frame: pd.DataFrame, name: str, variant: tuple[float, str]) -> pd.DataFrame:
    """``frame``'s rows of data set ``name`` at ``variant`` (budget, rounding)."""
    return frame[
        (frame.dataset == name)
        & np.isclose(frame.global_p_error, variant[0])
        & (frame.rounding == variant[1])
    ]


def _seconds_text(timed: pd.DataFrame, base: pd.DataFrame) -> str:
    if not len(timed):
        return "not measured"
    text = f"{float(timed.seconds.iloc[0]):.2f} s"
    if len(base):
        text += f" ({float(base.seconds.iloc[0]):.2f} s; {float(timed.ratio.iloc[0]):.2f}x faster)"
    return text


def _target_status(name: str, timed: pd.DataFrame, base: pd.DataFrame, upload: float | None) -> str:
    """The data set's targets (seconds, or no slower than the baseline; key bytes), met or missed."""
    secs = float(timed.seconds.iloc[0]) if len(timed) else None
    status = []
    if name in TARGET_SECONDS:
        goal = TARGET_SECONDS[name]
        if secs is None:
            status.append(f"<= {goal:g} s: not measured")
        else:
            over = "met" if secs <= goal else f"**missed** by {secs - goal:.1f} s"
            status.append(f"<= {goal:g} s: {over}")
    elif secs is not None and len(base):
        ratio = float(timed.ratio.iloc[0])
        status.append("no slower: " + ("met" if ratio >= 0.95 else f"**missed** ({ratio:.2f}x)"))
    if name in TARGET_KEY_BYTES:
        goal = TARGET_KEY_BYTES[name]
        if upload is None:
            status.append(f"keys <= {goal / 1e6:g} MB: not measured")
        else:
            over = "met" if upload <= goal else f"**missed** by {(upload - goal) / 1e6:.0f} MB"
            status.append(f"keys <= {goal / 1e6:g} MB: {over}")
    return "; ".join(status)


def summary_table(seconds: pd.DataFrame, summary: list[dict], keys: pd.DataFrame | None) -> str:
    """Each data set's owner setting: seconds (the baseline's in the same run), cost, keys, answers
    over the splits, and its target."""
    head = [
        "data set",
        "points kept (split 0)",
        "owner setting",
        "PBS",
        "complexity",
        "median s per query (1e-4 exact, same run)",
        "evaluation keys (upload)",
        "agreement, accuracy (float k-NN), splits",
        "target",
    ]
    table = []
    for name in BUNDLED:
        settings = owner_settings(name)
        variant = (float(settings.global_p_error or BASELINE[0]), settings.rounding)
        entry = next(
            (
                e
                for e in summary
                if e["dataset"] == name
                and np.isclose(e["global_p_error"], variant[0])
                and e["rounding"] == variant[1]
            ),
            None,
        )
        timed, base = _of(seconds, name, variant), _of(seconds, name, BASELINE)
        keyed = _of(keys, name, variant) if keys is not None else pd.DataFrame()
        upload = float(keyed.upload_bytes.iloc[0]) if len(keyed) else None
        answers = "not measured"
        if entry is not None:
            answers = (
                f"{100 * entry['agreement']:.2f} %, {entry['accuracy']:.3f} ({entry['float_knn']:.3f}), "
                f"{entry['splits']}"
            )
        table.append(
            [
                name,
                f"{entry['n_kept']:,}" if entry is not None else "",
                f"budget {variant[0]:g}, {variant[1]} rounding",
                f"{entry['pbs_count']:,}" if entry is not None else "",
                f"{entry['complexity']:.3g}" if entry is not None else "",
                _seconds_text(timed, base),
                f"{upload / 1e6:.0f} MB" if upload is not None else "not measured",
                answers,
                _target_status(name, timed, base, upload),
            ]
        )
    return markdown.table(head, table) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", nargs="+", type=Path, required=True, help="knn_budget_seconds CSVs")
    parser.add_argument(
        "--budget", type=Path, default=Path("results/knn_budget.csv"), help="knn_budget's CSV"
    )
    parser.add_argument("--keys", type=Path, default=None, help="knn_budget_seconds --keys-only CSV")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder of the figures and table")
    args = parser.parse_args(argv)
    seconds = seconds_table(args.seconds)
    summary = summarize(read_rows(args.budget))
    keys = pd.read_csv(args.keys) if args.keys is not None else None
    args.out.mkdir(parents=True, exist_ok=True)
    for name in BUNDLED:
        path = figure(name, seconds, summary, args.out)
        print(name, path or "no variant with both seconds and answers")
    table = summary_table(seconds, summary, keys)
    (args.out / "knn_speed_summary.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
