"""CSV tables, PNG figures and the Markdown report of ``petlab-experiments all``.

Every figure carries the machine line of :func:`petlab.experiments.machine.describe`; the report puts the
papers' published figures beside ours (Ameur et al. PSD 2022 Tables 4-5; Bindschaedler et al. VLDB
2017 Tables 3 and 5; the qualitative findings of Abowd et al. 2009 and of the adaptive-histogram
paper's Figure 5, which publish curves rather than numbers).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from petlab.experiments import markdown
from petlab.plaindata.dp.privacy_cost import delta_text, epsilon_text
from petlab.plaindata.onthemap.statement import NEIGHBOURS, NOT_COVERED, PUBLIC

# Ameur et al., PSD 2022: Table 4 (Iris, k = 3) and Table 5 (bandwidth per query, KB)
PAPER_IRIS = {"HE": "0.97, 1.72 s (0.46 s parallel)", "clear": "0.95, 1.8 ms"}
PAPER_BANDWIDTH_KB = {"iris": "28", "wine": "64", "breast_cancer": "128", "digits": "296 (MNIST)"}
# Bindschaedler et al., VLDB 2017: Table 3 (accuracy / agreement, %) and Table 5 (distinguishing, %)
PAPER_TABLE3 = {
    "reals": ("77.8 / 80.4 / 79.3", "80.2 / 86.4 / 92.4"),
    "marginals": ("57.9 / 63.8 / 69.2", "58.5 / 65.4 / 75.6"),
    "synthetics": ("72.1-72.4 / 75.2-75.3 / 77.5-78.1", "73.6-73.9 / 78.9-79.2 / 82.4-83.9"),
}
PAPER_TABLE5 = {
    "reals": ("50", "50"),
    "marginals": ("79.8", "73.2"),
    "synthetics": ("60.1-63.0", "57.9-59.8"),
}


def _footer(figure, machine: str) -> None:
    figure.text(0.01, 0.005, machine, fontsize=6, color="0.35", wrap=True)


def _save(figure, path: Path, machine: str) -> Path:
    _footer(figure, machine)
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def knn_figures(knn: pd.DataFrame, sweeps: pd.DataFrame, out: Path, machine: str) -> list[Path]:
    paths = []
    figure, axis = plt.subplots(figsize=(7, 3.6))
    pivot = knn.pivot_table(index="dataset", columns="protocol", values="median_s")
    pivot.plot.bar(ax=axis, logy=True, rot=0)
    axis.set_ylabel("median latency per query (s, log)")
    axis.set_title("Encrypted k-NN over gRPC loopback")
    # beside the bars, not over them (the tallest bar, a log scale, reaches the top corner)
    axis.legend(title="protocol", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    paths.append(_save(figure, out / "knn_latency.png", machine))
    present = [sweep for sweep in ("n", "d", "k") if (sweeps.sweep == sweep).any()] if len(sweeps) else []
    if present:  # one panel per sweep that was run: no empty axes
        figure, axes = plt.subplots(1, len(present), figsize=(3.4 * len(present) + 0.4, 3.4), squeeze=False)
        for axis, sweep in zip(axes[0], present, strict=True):
            part = sweeps[sweeps.sweep == sweep].sort_values(sweep)
            axis.plot(part[sweep], part.server_median_s, "o-", label="latency (s)")
            axis.set_xlabel(sweep)
            axis.set_ylabel("server latency (s)")
            twin = axis.twinx()
            twin.plot(part[sweep], part.pbs_count, "s--", color="C1", label="PBS")
            twin.set_ylabel("PBS per query")
            axis.set_title(f"HE k-NN against {sweep} (Figure {dict(n=7, d=8, k=9)[sweep]})")
        paths.append(_save(figure, out / "knn_sweeps.png", machine))
    return paths


def synthesis_figures(onthemap, commute, adaptive, plausible, out: Path, machine: str) -> list[Path]:
    paths = []
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for axis, sweep, column in zip(axes, ("eps", "p_min"), ("eps", "p_min"), strict=True):
        part = onthemap[onthemap.sweep == sweep].sort_values(column)
        for name in [c for c in part.columns if c.startswith("imse_")]:
            axis.plot(part[column], part[name], "o-", label=name.removeprefix("imse_"))
        axis.set_xlabel(column)
        axis.set_ylabel("root average IMSE")
        axis.legend(fontsize=6, title="employment", title_fontsize=6)
    axes[0].set_title("OnTheMap: IMSE against eps (delta 1e-6)")
    axes[1].set_title("OnTheMap: IMSE against p_min (eps 4.6)")
    paths.append(_save(figure, out / "onthemap_imse.png", machine))
    if commute is not None and len(commute):
        figure, axis = plt.subplots(figsize=(4.5, 4))
        axis.scatter(commute.true_miles, commute.synthetic_miles, s=3, alpha=0.4)
        top = float(max(commute.true_miles.max(), commute.synthetic_miles.max()))
        axis.plot([0, top], [0, top], color="0.5", lw=0.8)
        axis.set_xlabel("true average commute (miles)")
        axis.set_ylabel("synthetic average commute (miles)")
        axis.set_title("Average commute per destination, eps 4.6")
        paths.append(_save(figure, out / "onthemap_commute.png", machine))
    figure, axis = plt.subplots(figsize=(5.5, 3.6))
    for eps, part in adaptive.groupby("eps"):
        axis.plot(part.depth, part.earthmover_per_point, "o-", label=f"eps {eps:g}")
    axis.set_xlabel("depth")
    axis.set_ylabel("earthmover approximation per point")
    axis.set_title("Adaptive histograms (Figure 5)")
    axis.legend()
    paths.append(_save(figure, out / "adaptive_earthmover.png", machine))
    figure, axis = plt.subplots(figsize=(6.5, 3.6))
    plausible.set_index("data")[["tvd_1way", "tvd_2way"]].plot.bar(ax=axis, rot=0)
    axis.set_ylabel("mean TVD against other reals")
    axis.set_title("Plausible deniability: marginal TVD (Figures 3-4)")
    paths.append(_save(figure, out / "plausible_tvd.png", machine))
    return paths


EPSILON_COLUMNS = ("eps_prime", "total_eps", "per_record_epsilon", "whole_release_epsilon")
DELTA_COLUMNS = ("per_record_delta", "whole_release_delta")


def _bound(value, text) -> str:
    """A privacy bound as every program prints it (rounded up); other cells as they are."""
    if isinstance(value, str):
        return value
    return "-" if value is None or pd.isna(value) else text(float(value))


def _markdown(frame: pd.DataFrame, digits: int = 3) -> str:
    shown = frame.copy()
    for column in shown.columns:
        if column in EPSILON_COLUMNS or column in DELTA_COLUMNS:
            text = epsilon_text if column in EPSILON_COLUMNS else delta_text
            shown[column] = shown[column].map(lambda v, text=text: _bound(v, text))
        elif pd.api.types.is_float_dtype(shown[column]):
            shown[column] = shown[column].map(lambda v: f"{v:.{digits}g}")
    return markdown.frame_table(shown)


def _table_section(frame: pd.DataFrame | None, title: str, *intro: str) -> list[str]:
    """A report section: ``title``, the ``intro`` paragraph, ``frame``'s table; nothing for no rows."""
    if frame is None or not len(frame):
        return []
    return [title, "", *([*intro, ""] if intro else []), _markdown(frame), ""]


EVALUATION_NOTICE = (
    "An evaluation, not a release: the figures here are computed from the (simulated or real) "
    "confidential data and compared with it; no privacy statement covers them."
)


def headlines(results: dict[str, pd.DataFrame]) -> list[tuple[str, str]]:
    """The few results a reader should look at first, as (what, result) pairs, from the tables
    ``run_all`` wrote (a part that was not run gives no line)."""
    lines = []
    knn = results.get("knn")
    he = knn[knn.protocol.str.startswith("HE")] if knn is not None else None
    if he is not None and len(he):
        first = he.iloc[0]
        latency = ", ".join(f"{row.dataset} {row.median_s:.2g} s" for row in he.itertuples())
        lines.append(("encrypted k-NN, median latency per query", f"{latency} ({first.protocol})"))
        checked = round(float((he.agrees_with_clear * he.queries).sum()))
        lines.append(
            (
                "encrypted k-NN, cost of one query",
                f"{first.dataset}: {first.bytes_up / 1e3:,.1f} kB up, {first.bytes_down / 1e3:,.1f} kB down, "
                f"{first.key_bytes / 1e6:,.0f} MB of keys once; {checked} of {int(he.queries.sum())} "
                "encrypted answers equal the clear reference",
            )
        )
    accuracy = results.get("knn_accuracy")
    if accuracy is not None and len(accuracy):
        mean = accuracy.groupby("dataset", sort=False)[["accuracy", "float_knn"]].mean()
        lines.append(
            (
                "k-NN accuracy, owner's settings (float k-NN)",
                ", ".join(f"{name} {r.accuracy:.2f} ({r.float_knn:.2f})" for name, r in mean.iterrows()),
            )
        )
    commute = results.get("onthemap_commute")
    if commute is not None and len(commute):
        corr = commute.true_miles.corr(commute.synthetic_miles)
        true, synthetic = commute.true_miles.mean(), commute.synthetic_miles.mean()
        lines.append(
            (
                "OnTheMap synthetic commutes, eps 4.6",
                f"mean commute {true:.1f} mi true, {synthetic:.1f} mi "
                f"synthetic; per-destination correlation {corr:.2f} over {len(commute):,} destinations",
            )
        )
    plausible = results.get("plausible")
    synthetic = plausible[plausible.data.str.startswith("omega")] if plausible is not None else None
    if synthetic is not None and len(synthetic) and "distinguish_rf" in synthetic:
        row = synthetic.iloc[0]
        lines.append(
            (
                "plausible deniability, synthetic records",
                f"a random forest tells them from real ones {row.distinguish_rf:.0%} of the time (50% is "
                f"chance; {row.data})",
            )
        )
    return lines


def write_report(
    results: dict[str, pd.DataFrame],
    figures: list[Path],
    out: Path,
    machine: str,
    mode: str,
    link_notes: list[str] | None = None,
) -> Path:
    lines = [
        f"# petlab experiments ({mode})",
        "",
        "| result | value |",
        "|:--|:--|",
        *[f"| {what} | {value} |" for what, value in headlines(results)],
        "",
        *[f"![{p.stem}]({p.name})" for p in figures],
        "",
        f"Machine and software: {machine}",
        "",
        "Every utility figure below is computed from the evaluation data (simulated commute data, the"
        " ACS file) and from seeded runs: an evaluation, not a release. Figures derived from the real"
        " records that a release would have to keep confidential (the plausible-deniability pass"
        " rate, OnTheMap's prior mass and rejected draws) are marked *derived from the real data*;"
        " `petlab-synth` never prints them (they go to `--diagnostics`).",
        "",
    ]
    lines += _knn_sections(results)
    lines += _onthemap_section(results.get("onthemap"), results.get("onthemap_commute"))
    lines += _adaptive_section(results.get("adaptive"))
    lines += _plausible_section(results.get("plausible"))
    lines += _links_section(link_notes or [])
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _knn_sections(results: dict[str, pd.DataFrame]) -> list[str]:
    """Encrypted k-NN over gRPC beside the paper's figures, accuracy, and the sweeps."""
    lines: list[str] = []
    knn = results.get("knn")
    if knn is not None:
        shown = knn.copy()
        shown["paper (Ameur et al.)"] = [
            "; ".join(
                part
                for part in (
                    PAPER_IRIS.get("HE" if p.startswith("HE") else p, "") if d == "iris" else "",
                    f"{PAPER_BANDWIDTH_KB.get(d, '-')} KB/query" if p.startswith("HE") else "",
                )
                if part
            )
            for d, p in zip(shown.dataset, shown.protocol, strict=True)
        ]
        lines += [
            "## Encrypted k-NN over gRPC (Tables 4-5)",
            "",
            "The encrypted families run here (`--quick`: the default thermo family with the owner's bits"
            " and distance at this n; `--full`: thermo, fast and the paper's delta matrix);"
            " `accuracy` is each protocol's integer algorithm on the whole held-out split (its clear"
            " reference, which the encrypted class equals: the tests and `knn-bench` check it);"
            " `encrypted_accuracy` covers only the `queries` rows sent encrypted, a smoke test when they"
            " are few; `agrees_with_clear` compares those answers with the clear reference of the same"
            " integer algorithm. Bytes are measured on the channel (serialized payloads; `key_bytes`"
            " includes the warm-up query); latencies per query; `over_clear` is"
            " the median latency over clear k-NN's in this run. Paper column: accuracy and time (Table 4,"
            " Iris) and bandwidth (Table 5).",
            "",
            _markdown(shown),
            "",
        ]
    lines += _table_section(
        results.get("knn_accuracy"),
        "## Accuracy of the owner's settings beside float k-NN",
        "The thermo family with each data set's owner settings (`server.knn.datasets.owner_settings`),"
        " its clear reference on the whole held-out split, beside scikit-learn's float k-NN on the"
        " whole training split (min-max scaled); `petlab-experiments knn-accuracy --splits 10` for"
        " more splits and the older families.",
    )
    lines += _table_section(
        results.get("knn_sweeps"), "## Encrypted k-NN (default family) against n, d and k (cf. Figures 7-9)"
    )
    return lines


def _onthemap_section(onthemap: pd.DataFrame | None, commute: pd.DataFrame | None) -> list[str]:
    lines: list[str] = []
    if onthemap is not None:
        lines += [
            "## OnTheMap: root average IMSE against eps and p_min",
            "",
            "Abowd, Gehrke and Vilhuber (2009) found the quality very sensitive to eps below 4, flat above,"
            " and no effect of p_min. ICDE 2008 reports eps' about 8.6 at eps 4.6, min f 0.0378.",
            f"`eps_prime`: each release's (eps', delta)-probabilistic DP per destination ({NEIGHBOURS};"
            f" {PUBLIC}); {NOT_COVERED}.",
            "",
            _markdown(onthemap),
            "",
        ]
    if commute is not None and len(commute):
        corr = commute.true_miles.corr(commute.synthetic_miles)
        lines += [
            f"Average commute per destination at eps 4.6: correlation synthetic/true {corr:.3f} over"
            f" {len(commute)} destinations; mean true {commute.true_miles.mean():.1f} mi, synthetic"
            f" {commute.synthetic_miles.mean():.1f} mi.",
            "",
        ]
    return lines


def _adaptive_section(adaptive: pd.DataFrame | None) -> list[str]:
    if adaptive is None:
        return []
    deepest = adaptive[adaptive.depth == adaptive.depth.max()]
    return [
        "## Adaptive histograms: earthmover approximation (Figure 5)",
        "",
        "`total_eps`: the release's (eps, 0)-DP (neighbours: one worker added or removed), from the"
        " cost objects: 2 eps for the improved tree (Theorem 3) and eps for the leaf counts.",
        "",
        _markdown(deepest),
        "",
    ]


def _plausible_section(plausible: pd.DataFrame | None) -> list[str]:
    if plausible is None:
        return []
    shown = plausible.copy()
    key = ["synthetics" if d.startswith("omega") else d for d in shown.data]
    shown["paper acc T/RF/Ada"] = [PAPER_TABLE3[k][0] for k in key]
    shown["paper agree"] = [PAPER_TABLE3[k][1] for k in key]
    shown["paper distinguish RF/Tree"] = [" / ".join(PAPER_TABLE5[k]) for k in key]
    return [
        "## Plausible deniability (Tables 3 and 5, Figures 3-4)",
        "",
        "Model eps = 1, gamma = 4, eps0 = 1 (k: see run_all.py); TVD against other reals; classifiers"
        " trained on each set and tested on held-out reals; distinguishing accuracy on a 50/50 held-out"
        " mix. `pass_rate` is *derived from the real data* (not covered by the release's accounting).",
        "",
        _markdown(shown),
        "",
    ]


def _links_section(link_notes: list[str]) -> list[str]:
    if not link_notes:
        return []
    return [
        "## A device's wait over emulated links",
        "",
        "`petlab-experiments links`: a real server and `petlab-client` through links with a"
        " bandwidth each way and a round-trip time; the figures `links_*` below.",
        "",
        *link_notes,
        "",
    ]
