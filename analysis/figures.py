"""Comparison figures: accuracy against simulated time with a confidence band over seeds,
and any metric against a swept setting. Every figure is written in each requested format."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from mecsim.analysis.compare import t_half_width  # noqa: E402
from mecsim.analysis.plots import (  # noqa: E402
    bounds,
    legend_below,
    line_style,
    save_figure,
    wrapped,
)

FORMATS = ("png", "svg", "pdf")


def step_at(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The last value reached at or before each grid time (NaN before the first)."""
    index = np.searchsorted(times, grid, side="right") - 1
    out = values[np.clip(index, 0, None)].astype(float)
    out[index < 0] = math.nan
    return out


PANELS = (
    ("personal_acc", "personalized (weighted local test)"),
    ("generic_acc", "generic (global test)"),
)


def _curve(rounds: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    time = "t_personal" if column == "personal_acc" and "t_personal" in rounds else "t_end"
    data = rounds[[time, column]].dropna().sort_values(time)
    return data[time].to_numpy(float), data[column].to_numpy(float)


def plot_curves(
    variants: list[tuple[str, list[pd.DataFrame]]],
    path: Path,
    targets: Sequence[float] = (),
    formats: Sequence[str] = ("png",),
    points: int = 200,
    assumed: Sequence[bool] = (),
) -> list[Path]:
    """Accuracy against simulated time, personalized and generic panels: per variant the
    mean over its seeds (each seed's curve held between evaluations) and a 95 % band;
    dotted lines at the targets. A panel no run measured is left out. Variants flagged in
    ``assumed`` (cost-only runs' ``execution.accuracy_curve``) are labelled so. Each
    variant has its own dashes and markers (:func:`~.plots.line_style`)."""
    panels = [
        (column, title)
        for column, title in PANELS
        if any(len(_curve(r, column)[0]) for _, seeds in variants for r in seeds)
    ] or [PANELS[0]]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False, sharey=True,
        layout="constrained",
    )  # fmt: skip
    for ax, (column, title) in zip(axes[0], panels, strict=True):
        for index, (label, seeds) in enumerate(variants):
            guess = index < len(assumed) and assumed[index]
            curves = [c for c in (_curve(r, column) for r in seeds) if len(c[0])]
            if not curves:
                continue
            end = min(t[-1] for t, _ in curves)  # every seed has reached this time
            start = min(t[0] for t, _ in curves)
            grid = np.linspace(start, end, points) if end > start else np.array([start])
            stacked = np.vstack([step_at(t, v, grid) for t, v in curves])
            with warnings.catch_warnings():  # grid times before a late seed's first point
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(stacked, axis=0)
            (line,) = ax.plot(
                grid,
                mean,
                **line_style(index, len(grid)),
                label=f"{label} (n={len(curves)}{', assumed accuracy' if guess else ''})",
            )
            if len(curves) > 1:  # the band within the accuracy's range
                half = t_half_width(stacked)
                low, high = (np.clip(mean + d, *bounds(column)) for d in (-half, half))
                ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2)
        for target in targets:
            ax.axhline(target, color="0.4", linestyle=":", linewidth=1)
            ax.annotate(
                f"{target:g}",
                (1.0, target),
                xycoords=("axes fraction", "data"),
                fontsize=7,
                color="0.3",
                ha="right",
                va="bottom",
            )
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("simulated time (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("accuracy (mean over seeds, 95 % band)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        legend_below(fig, handles, labels)
    return save_figure(fig, path, formats)


def plot_metric(
    table: pd.DataFrame,
    x: str,
    y: str,
    path: Path,
    formats: Sequence[str] = ("png",),
    settings: Sequence[str] = (),
) -> list[Path]:
    """``y`` (a comparison column) against the swept setting ``x``: one line per group of
    runs equal in every other swept setting (``settings``: the swept columns); points are the mean over seeds with 95 %
    confidence bars."""
    others = [c for c in ("algorithm", "protocol") if c in table]
    others += [
        c
        for c in settings
        if c not in (x, "seed", "algorithm.name", "protocol.kind") and c in table
    ]
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    lo, hi = bounds(y)
    groups = table.groupby(others, sort=False, dropna=False) if others else [((), table)]
    for index, (key, group) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        stats = group.groupby(x)[y].agg(list).sort_index()
        xs = stats.index.to_numpy(float)
        values = [np.asarray(v, dtype=float) for v in stats]
        means = np.array([np.nanmean(v) if np.isfinite(v).any() else math.nan for v in values])
        halves = np.nan_to_num([t_half_width(v[:, None])[0] for v in values])
        # each bar within the quantity's range: no time below zero, no accuracy above one
        below, above = np.minimum(halves, means - lo), np.minimum(halves, hi - means)
        label = " / ".join(str(k) for k in key[:2])
        extra = ", ".join(f"{c}={v}" for c, v in zip(others[2:], key[2:], strict=True))
        style = line_style(index)
        ax.errorbar(
            xs,
            means,
            yerr=np.nan_to_num(np.vstack([below, above])),
            linestyle=style["linestyle"],
            marker=style["marker"],
            capsize=3,
            label=f"{label} ({extra})" if extra else label,
        )
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if (
        len(table[x].unique()) > 2
        and (table[x] > 0).all()
        and table[x].max() / table[x].min() >= 10
    ):
        ax.set_xscale("log")
    ax.set_title(wrapped(f"{y} against {x} (mean over seeds, 95 % confidence)", 70), fontsize=10)
    ax.grid(alpha=0.3)
    legend_below(fig, *ax.get_legend_handles_labels())
    return save_figure(fig, path, formats)
