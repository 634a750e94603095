"""Plots of a run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def plot_accuracy(rounds: pd.DataFrame, path: Path, title: str, assumed: bool = False) -> None:
    """Accuracy (generic and personalized) against simulated time, saved as PNG.

    ``assumed``: a cost-only run's accuracy, read off ``execution.accuracy_curve``:
    drawn dashed and labelled as assumed.
    """
    fig, ax = plt.subplots(figsize=(6, 4))
    if assumed:
        data = rounds[["t_end", "generic_acc"]].dropna()
        ax.plot(
            data["t_end"], data["generic_acc"], "--", label="assumed (execution.accuracy_curve)"
        )
    for column, label in (
        ("generic_acc", "generic (global test)"),
        ("personal_acc", "personalized (local tests)"),
    ):
        data = rounds[["t_end", column]].dropna()
        if not data.empty and not assumed:
            ax.plot(data["t_end"], data[column], marker=".", label=label)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # cost-only runs without a curve have no accuracy
        ax.legend()
    # fixed margins for this one layout (accuracy ticks, one-line labels and title):
    # tight_layout's extra draw was a quarter of writing the quickstart's run directory
    fig.subplots_adjust(left=0.11, right=0.96, bottom=0.12, top=0.92)
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)
