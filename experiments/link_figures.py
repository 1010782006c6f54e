"""The figures of ``petlab-experiments links``: measured points (markers) beside the model's lines.

A family's line is its own measured run with the link changed: the run's fixed part (compute and key
generation: the model less its link terms) plus its rounds x RTT and its wire bytes / bandwidth at
each point of the axis (``experiments.link_model``). A figure whose panels would have no measured
point is not drawn.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from petlab.experiments.link_model import crossover_rtt
from petlab.experiments.link_relay import MBIT, PROFILES, LinkProfile
from petlab.experiments.report import _save

COLOURS = {"thermo": "C0", "fast": "C1", "paper": "C2", "paillier": "C3"}
LABELS = {
    "thermo": "TFHE thermo",
    "fast": "TFHE fast",
    "paper": "TFHE paper",
    "paillier": "Paillier baseline",
}
UPLOAD_FLOOR_MBIT = 256 * 1024 * 8 / 1e6  # petlab-server's default --upload-min-kib-per-second
LINE_RTT_S = 0.020  # the bandwidth figure's lines: home broadband's RTT
DOWN_PER_UP = 5  # ... and a downlink five times the uplink (home broadband's ratio)
LINE_UP_MBIT, LINE_DOWN_MBIT = 20, 100  # the RTT figures' lines: home broadband's bandwidth


def _shaped(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame.model_run_s.notna()]


def _link_terms(rounds, rtt_s, up_bytes, down_bytes, up_mbit, down_mbit):
    return rounds * rtt_s + up_bytes / (up_mbit * MBIT) + down_bytes / (down_mbit * MBIT)


def run_fixed(r) -> float:
    """A run's model less its link terms: compute and key generation."""
    return r.model_run_s - _link_terms(
        r.rounds, r.rtt_ms / 1000, r.wire_up, r.wire_down, r.up_mbit, r.down_mbit
    )


def query_fixed(r) -> float:
    """A query's model less its link terms: the query calls' compute."""
    return r.model_query_s - _link_terms(
        r.query_rounds, r.rtt_ms / 1000, r.query_up, r.query_down, r.up_mbit, r.down_mbit
    )


def _typical(rows: pd.DataFrame):
    """The run whose model is the median of ``rows`` (the line's source)."""
    ordered = rows.sort_values("model_run_s")
    return ordered.iloc[len(ordered) // 2]


def bandwidth_figure(frame: pd.DataFrame, out: Path, machine: str) -> Path | None:
    shaped = _shaped(frame)
    phases = [p for p in ("first", "later") if (shaped.phase == p).any()]
    if not phases:
        return None
    figure, axes = plt.subplots(1, len(phases), figsize=(5.2 * len(phases), 3.9), squeeze=False)
    up = np.logspace(0, 3.3, 60)
    for axis, phase in zip(axes[0], phases, strict=True):
        for family, rows in shaped[shaped.phase == phase].groupby("family", sort=False):
            r = _typical(rows)
            line = run_fixed(r) + _link_terms(
                r.rounds, LINE_RTT_S, r.wire_up, r.wire_down, up, up * DOWN_PER_UP
            )
            axis.plot(up, line, "-", color=COLOURS[family], lw=1, label=f"{LABELS[family]} (model)")
            axis.plot(
                rows.up_mbit, rows.run_s, "o", color=COLOURS[family], label=f"{LABELS[family]} (measured)"
            )
        if phase == "first" and (shaped[shaped.phase == "first"].key_bytes > 0).any():
            axis.axvline(UPLOAD_FLOOR_MBIT, color="0.5", ls=":", lw=1)
            axis.text(UPLOAD_FLOOR_MBIT * 1.05, 0.98, "server cancels slower\nkey uploads (default)",
                      transform=axis.get_xaxis_transform(), fontsize=6, va="top", color="0.4")  # fmt: skip
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("uplink Mbit/s (downlink 5x; lines at 20 ms RTT)")
        axis.set_ylabel("device's wait (s)")
        axis.set_title(f"{phase} query against bandwidth")
        axis.legend(fontsize=6)
    return _save(figure, out / "links_bandwidth.png", machine)


def rtt_figure(frame: pd.DataFrame, out: Path, machine: str) -> Path | None:
    later = _shaped(frame)
    later = later[later.phase == "later"]
    if not len(later):
        return None
    figure, axes = plt.subplots(1, 2, figsize=(10.4, 3.9))
    rtt = np.logspace(-4, 0.3, 60)
    for family, rows in later.groupby("family", sort=False):
        r = _typical(rows)
        colour = COLOURS[family]
        run_line = run_fixed(r) + _link_terms(
            r.rounds, rtt, r.wire_up, r.wire_down, LINE_UP_MBIT, LINE_DOWN_MBIT
        )
        query_line = query_fixed(r) + _link_terms(
            r.query_rounds, rtt, r.query_up, r.query_down, LINE_UP_MBIT, LINE_DOWN_MBIT
        )
        axes[0].plot(
            rtt * 1000, run_line, "-", color=colour, lw=1, label=f"{LABELS[family]} ({int(r.rounds)} rounds)"
        )
        axes[0].plot(rows.rtt_ms, rows.run_s, "o", color=colour)
        axes[1].plot(
            rtt * 1000,
            query_line,
            "-",
            color=colour,
            lw=1,
            label=f"{LABELS[family]} ({int(r.query_rounds)} per query)",
        )
        axes[1].plot(rows.rtt_ms, rows.query_s, "o", color=colour)
    titles = ("a later run of petlab-client (new connection)", "one query on a kept connection")
    for axis, title in zip(axes, titles, strict=True):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("round-trip time, ms (lines at 20/100 Mbit/s)")
        axis.set_ylabel("device's wait (s)")
        axis.set_title(f"{title}: against RTT", fontsize=9)
        axis.legend(fontsize=6)
    return _save(figure, out / "links_rtt.png", machine)


def crossovers(frame: pd.DataFrame) -> list[tuple[str, float | None]]:
    """Per encrypted family: the RTT (s) beyond which its one-round query answers before the
    Paillier baseline's two rounds (each family's typical later query, home broadband's bandwidth)."""
    later = _shaped(frame)
    later = later[later.phase == "later"]
    if not (later.family == "paillier").any():
        return []

    def fixed(r) -> float:
        return query_fixed(r) + _link_terms(0, 0, r.query_up, r.query_down, LINE_UP_MBIT, LINE_DOWN_MBIT)

    paillier = _typical(later[later.family == "paillier"])
    return [
        (family, crossover_rtt(fixed(r), int(r.query_rounds), fixed(paillier), int(paillier.query_rounds)))
        for family, rows in later[later.family != "paillier"].groupby("family", sort=False)
        for r in [_typical(rows)]
    ]


def crossover_figure(frame: pd.DataFrame, out: Path, machine: str) -> Path | None:
    points = crossovers(frame)
    if not points:
        return None
    later = _shaped(frame)
    later = later[later.phase == "later"]
    found = [rtt for _, rtt in points if rtt]
    top = max([2.0, *(2 * rtt for rtt in found)])
    rtt = np.logspace(-4, np.log10(top), 80)
    beyond = dict(points)
    figure, axis = plt.subplots(figsize=(6.4, 4.0))
    for family, rows in later.groupby("family", sort=False):
        r = _typical(rows)
        line = query_fixed(r) + _link_terms(
            r.query_rounds, rtt, r.query_up, r.query_down, LINE_UP_MBIT, LINE_DOWN_MBIT
        )
        label = f"{LABELS[family]}: {int(r.query_rounds)} round(s)"
        first_beyond = beyond.get(family)
        if first_beyond:
            label += f", first beyond {first_beyond * 1000:,.0f} ms"
            axis.axvline(first_beyond * 1000, color=COLOURS[family], ls=":", lw=1)
        axis.plot(rtt * 1000, line, "-", color=COLOURS[family], label=label)
        axis.plot(rows.rtt_ms, rows.query_s, "o", color=COLOURS[family], ms=4)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("round-trip time, ms (20/100 Mbit/s)")
    axis.set_ylabel("one query on a kept connection (s)")
    axis.set_title("Where one round beats two: encrypted k-NN against the Paillier baseline", fontsize=9)
    axis.legend(fontsize=6)
    return _save(figure, out / "links_crossover.png", machine)


BREAKDOWN = (
    ("keygen_s", "key generation (device)"),
    ("setup_s", "connection + models + specs"),
    ("upload_s", "key upload (+ server's key preparation)"),
    ("query_s", "query: upload, evaluation, download"),
)


def moved(r, profile: LinkProfile) -> dict[str, float]:
    """A measured first run's parts moved to another link: each part less its link terms at the
    measured profile, plus those at ``profile`` (setup: its calls and the handshake; upload: the
    wire bytes up that are not the query's, one round; query: its calls)."""
    upload_bytes = r.wire_up - r.query_up
    setup_rounds = r.rounds - r.query_rounds - 1

    def terms(rtt_s, up_mbit, down_mbit) -> dict[str, float]:
        return {
            "keygen_s": 0.0,
            "setup_s": setup_rounds * rtt_s,
            "upload_s": _link_terms(1, rtt_s, upload_bytes, 0, up_mbit, down_mbit),
            "query_s": _link_terms(r.query_rounds, rtt_s, r.query_up, r.query_down, up_mbit, down_mbit),
        }

    there = terms(r.rtt_ms / 1000, r.up_mbit, r.down_mbit)
    here = terms(profile.rtt_s, profile.up_mbit, profile.down_mbit)
    return {part: float(r[part]) - there[part] + here[part] for part, _ in BREAKDOWN}


def first_query_figure(frame: pd.DataFrame, out: Path, machine: str) -> Path | None:
    """Stacked bars of the measured first queries; a profile whose first query was not measured
    (``--quick``) gets the measured run moved to its link (:func:`moved`), hatched and marked."""
    first = frame[(frame.phase == "first") & (frame.key_bytes > 0)]
    if not len(first):
        return None
    bars: list[tuple[str, dict[str, float], bool]] = []
    for family, rows in first.groupby("family", sort=False):
        for profile, part in rows.groupby("profile", sort=False):
            bars.append((f"{family}\n{profile}", part[[c for c, _ in BREAKDOWN]].median().to_dict(), False))
        shaped = rows[rows.model_run_s.notna()]
        if len(shaped):
            source = _typical(shaped)
            for profile in PROFILES:
                if profile.name not in set(rows.profile):
                    bars.append((f"{family}\n{profile.name}\n(model)", moved(source, profile), True))
    figure, axis = plt.subplots(figsize=(max(5.0, 0.8 * len(bars) + 2.5), 4.2))
    bottom = np.zeros(len(bars))
    for index, (column, label) in enumerate(BREAKDOWN):
        values = np.array([parts[column] for _, parts, _ in bars])
        colours = [f"C{index}"] * len(bars)
        hatches = ["//" if modelled else "" for _, _, modelled in bars]
        drawn = axis.bar([name for name, _, _ in bars], values, bottom=bottom, color=colours, label=label)
        for patch, hatch in zip(drawn, hatches, strict=True):
            patch.set_hatch(hatch)
        bottom += values
    axis.set_ylabel("seconds")
    hatched = " (hatched: the model)" if any(modelled for _, _, modelled in bars) else ""
    axis.set_title(f"The first query: where the device's wait goes{hatched}", fontsize=9)
    axis.tick_params(axis="x", labelsize=7)
    axis.legend(fontsize=7)
    return _save(figure, out / "links_first_query.png", machine)


def figures(frame: pd.DataFrame, out: Path, machine: str) -> list[Path]:
    made = [
        bandwidth_figure(frame, out, machine),
        rtt_figure(frame, out, machine),
        first_query_figure(frame, out, machine),
        crossover_figure(frame, out, machine),
    ]
    return [p for p in made if p is not None]
