"""Gantt timelines (Chen et al. 2023, Fig. 2) and accuracy curves across runs."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

COLORS = {
    "download": "#4c72b0",
    "compute:generic": "#dd8452",
    "upload": "#55a868",
    "compute:personal": "#c44e52",
    "compute:local": "#dd8452",
}


def plot_gantt(
    runs: list[tuple[str, pd.DataFrame]], path: Path, clients: int = 4, rounds: int = 3
) -> None:
    """One panel per run: the first ``rounds`` rounds of the first ``clients`` clients.

    Each client has two lanes: communication (download, upload) above and
    computation (generic, personalized training) below, so wait-free's
    overlap of personalized training with the upload is visible; gaps are idle.
    """
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(9, 1.2 + 0.55 * clients * len(runs)), squeeze=False
    )
    for ax, (label, events) in zip(axes[:, 0], runs, strict=True):
        shown = events[
            (events["client"] >= 0) & (events["client"] < clients) & (events["round"] < rounds)
        ]
        for _, e in shown.iterrows():
            phase = e["phase"]
            lane = 0.2 if phase.startswith("compute") else -0.2
            ax.barh(
                e["client"] + lane,
                e["t_end"] - e["t_start"],
                left=e["t_start"],
                height=0.38,
                color=COLORS.get(phase, "#8172b3"),
                label=phase,
            )
        ax.set_yticks(range(clients), [f"client {c}" for c in range(clients)])
        ax.invert_yaxis()
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("simulated time (s)")
        handles, names = ax.get_legend_handles_labels()
        unique = dict(zip(names, handles, strict=True))
        ax.legend(
            unique.values(),
            unique.keys(),
            fontsize=7,
            loc="upper left",
            ncol=4,
            bbox_to_anchor=(0, -0.35 - 0.1 / max(clients, 1)),
            frameon=False,
        )
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def plot_curves(runs: list[tuple[str, pd.DataFrame]], path: Path) -> None:
    """Personalized accuracy against simulated time, every run on one plot."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, rounds in runs:
        time = "t_personal" if "t_personal" in rounds else "t_end"
        data = rounds[[time, "personal_acc"]].dropna()
        ax.plot(data[time], data["personal_acc"], marker=".", label=label)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("personalized accuracy (weighted local test)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)
