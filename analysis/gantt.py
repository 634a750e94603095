"""Gantt timelines of chosen rounds (Chen et al. 2023, Fig. 2), one panel per run.

By default each panel shows the clients that finish last in the chosen
rounds, slowest first: the straggler that sets a compute-and-wait round's
length is always in view. Each client has a communication lane (download,
upload) and a computation lane (generic, personalized, local training);
time a client spends on nothing is drawn as idle; dotted lines mark where
each round ends. All panels share the time axis, so runs compare at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from mecsim.analysis.plots import save_figure, wrapped  # noqa: E402

COLORS = {
    "download": "#4c72b0",
    "upload": "#55a868",
    "compute:generic": "#dd8452",
    "compute:local": "#dd8452",
    "compute:personal": "#c44e52",
    "idle": "#e6e6e6",
}
OTHER = "#8172b3"


def slowest_clients(events: pd.DataFrame, rounds: Sequence[int], count: int) -> list[int]:
    """The ``count`` clients whose work in ``rounds`` ends latest relative to each round's
    first event (mean over the rounds they took part in), slowest first."""
    shown = events[(events["client"] >= 0) & events["round"].isin(list(rounds))]
    if shown.empty:
        return []
    start = shown.groupby("round")["t_start"].transform("min")
    lateness = (shown["t_end"] - start).groupby([shown["round"], shown["client"]]).max()
    ranking = lateness.groupby(level="client").mean().sort_values(ascending=False, kind="stable")
    return [int(c) for c in ranking.index[:count]]


def idle_spans(
    busy: list[tuple[float, float]], start: float, end: float
) -> list[tuple[float, float]]:
    """The parts of [start, end] that no interval of ``busy`` covers."""
    spans, reach = [], start
    for lo, hi in sorted(busy):
        if lo > reach:
            spans.append((reach, min(lo, end)))
        reach = max(reach, hi)
        if reach >= end:
            break
    if reach < end:
        spans.append((reach, end))
    return [(lo, hi) for lo, hi in spans if hi > lo]


def plot_gantt(
    runs: list[tuple[str, pd.DataFrame, pd.DataFrame]],
    path: Path,
    *,
    clients: Sequence[int] | None = None,
    slowest: int = 4,
    rounds: Sequence[int] = (0, 1, 2),
    formats: Sequence[str] = ("png",),
) -> list[Path]:
    """One panel per ``(label, events, rounds_table)``: ``clients`` (default: the
    ``slowest`` ones of each run) over ``rounds``."""
    chosen = [
        list(clients) if clients is not None else slowest_clients(events, rounds, slowest)
        for _, events, _ in runs
    ]
    lanes = max((len(c) for c in chosen), default=1) or 1
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(10, 1.4 + 0.6 * lanes * len(runs)), squeeze=False, sharex=True,
        layout="constrained",
    )  # fmt: skip
    for ax, (label, events, table), shown in zip(axes[:, 0], runs, chosen, strict=True):
        window = events[events["round"].isin(list(rounds))]
        in_rounds = table[table["round"].isin(list(rounds))]
        start = float(window["t_start"].min()) if len(window) else 0.0
        end = float(max(window["t_end"].max(), in_rounds["t_end"].max())) if len(window) else 0.0
        for lane, client in enumerate(shown):
            own = window[window["client"] == client]
            busy = list(zip(own["t_start"], own["t_end"], strict=True))
            for lo, hi in idle_spans(busy, start, end):
                ax.barh(lane, hi - lo, left=lo, height=0.8, color=COLORS["idle"], zorder=0)
            for e in own.itertuples():
                y = lane + (0.2 if e.phase.startswith("compute") else -0.2)
                ax.barh(
                    y,
                    e.t_end - e.t_start,
                    left=e.t_start,
                    height=0.38,
                    color=COLORS.get(e.phase, OTHER),
                    zorder=2,
                )
        for r in in_rounds.itertuples():
            ax.axvline(r.t_end, color="0.2", linestyle=":", linewidth=1, zorder=3)
            ax.annotate(
                f"end r{r.round}",
                (r.t_end, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                ha="right",
                va="bottom",
                color="0.2",
            )
        ax.set_yticks(range(len(shown)), [f"client {c}" for c in shown], fontsize=8)
        ax.set_ylim(len(shown) - 0.5, -0.5)
        ax.set_title(wrapped(label, 110), fontsize=9, loc="left", pad=12)
    axes[-1, 0].set_xlabel("simulated time (s)")
    phases = sorted(
        {p for _, events, _ in runs for p in events["phase"].unique() if p in COLORS} | {"idle"}
    )
    fig.legend(
        [Patch(color=COLORS[p]) for p in phases],
        phases,
        fontsize=8,
        ncol=min(len(phases), 6),
        loc="outside lower center",
        frameon=False,
    )
    note = "clients: " + (
        "chosen" if clients is not None else f"the {slowest} slowest, slowest first"
    )
    fig.suptitle(f"rounds {', '.join(map(str, rounds))}; {note}", fontsize=9)
    return save_figure(fig, path, formats)
