"""What every figure mecsim writes shares (matplotlib, Agg backend: no display needed):
saving (SVG beside every PNG), a style per line that tells coinciding lines apart,
intervals clipped to their quantity's range, and the fit checks a test runs on every
figure (:func:`figure_problems`); and a run's ``accuracy.png``."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import LineCollection, PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402

DPI = 200
FIGURE_HOOKS: list[Callable[[Figure, Path], None]] = []
"""Called with each figure and its path before it is saved (the fit test collects here)."""

LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def line_style(index: int, points: int = 1) -> dict[str, object]:
    """The ``index``-th line's dashes, marker and marker spacing: no two of the first 32
    lines alike; markers of lines that coincide fall at different points, and where they
    must fall on the same ones (few points) a later line's are smaller, drawn on top."""
    every = max(1, points // 12)
    return {
        "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
        "marker": MARKERS[index % len(MARKERS)],
        "markevery": (index * max(1, every // 4) % every, every) if every > 1 else None,
        "markersize": 3 + (3 - index % 4),
    }


def bounds(quantity: str) -> tuple[float, float]:
    """The range a quantity can take: accuracies, fairness and utilization in [0, 1],
    times, bytes, energies, speedups and counts at least 0."""
    if "acc" in quantity or quantity in ("participation_jain", "band_utilization"):
        return 0.0, 1.0
    return 0.0, math.inf


def wrapped(title: str, width: int = 60) -> str:
    """``title`` broken into lines of at most ``width`` characters."""
    return "\n".join(textwrap.wrap(title, width)) or title


def legend_below(
    fig: Figure, handles: Sequence, labels: Sequence[str], fontsize: float = 8
) -> None:
    """The figure's legend under its plots, where the constrained layout makes room: each
    label wrapped to fit one column across the figure, as many columns side by side as fit
    (a character about 0.6 em wide, 45 points for the handle and the gap; at most 3)."""
    width_pt = fig.get_figwidth() * 72
    labels = [wrapped(label, int((width_pt - 65) / (0.6 * fontsize))) for label in labels]
    longest = max((len(line) for label in labels for line in label.split("\n")), default=1)
    ncol = int(max(1, min(3, len(labels), (width_pt - 20) // (0.6 * fontsize * longest + 45))))
    fig.legend(handles, labels, fontsize=fontsize, loc="outside lower center", ncol=ncol,
               frameon=False)  # fmt: skip


def save_figure(
    fig: Figure,
    path: Path,
    formats: Sequence[str] = ("png",),
    dpi: int = DPI,
    write: Callable[[Path, Callable[[Path], None]], None] | None = None,
) -> list[Path]:
    """Save ``fig`` as ``path`` in each of ``formats`` (SVG beside PNG always), each file
    through ``write(target, fill)`` (default: ``fill(target)``; a run directory passes its
    atomic writer); close it; return the files."""
    for hook in FIGURE_HOOKS:
        hook(fig, path)
    write = write or _write_directly
    chosen = list(dict.fromkeys([*formats, *(["svg"] if "png" in formats else [])]))
    written = [path.with_suffix(f".{fmt}") for fmt in chosen]
    for fmt, target in zip(chosen, written, strict=True):
        write(target, lambda p, f=fmt: fig.savefig(p, format=f, dpi=dpi))
    plt.close(fig)
    return written


def _write_directly(target: Path, fill: Callable[[Path], None]) -> None:
    fill(target)


def figure_problems(fig: Figure) -> list[str]:
    """What makes ``fig`` unfit to print: text outside the figure (a clipped title, legend
    or label), two labelled lines of one plot drawn alike, an interval outside its
    quantity's range (an axis labelled accuracy: [0, 1]; any other: at least 0)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = fig.bbox
    drawn: list[tuple[str, object]] = [
        (
            f"the plot {ax.get_title()[:40]!r} (its title, labels or ticks)",
            ax.get_tightbbox(renderer),
        )
        for ax in fig.axes
    ]
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    drawn += [("a legend", legend.get_window_extent(renderer)) for legend in legends]
    texts = [*fig.texts, *([fig._suptitle] if fig._suptitle is not None else [])]
    drawn += [
        (f"text {t.get_text()[:40]!r}", t.get_window_extent(renderer))
        for t in texts
        if isinstance(t, Text) and t.get_visible() and t.get_text().strip()
    ]
    problems = [
        f"{what} runs off the figure"
        for what, extent in drawn
        if extent is not None
        and (
            extent.x0 < box.x0 - 1
            or extent.x1 > box.x1 + 1
            or extent.y0 < box.y0 - 1
            or extent.y1 > box.y1 + 1
        )
    ]
    for ax in fig.axes:
        styles: dict[tuple, str] = {}
        for line in ax.get_lines():
            label = str(line.get_label())
            if label.startswith("_"):
                continue
            key = (line.get_color(), line.get_linestyle(), line.get_marker())
            if key in styles:
                problems.append(f"lines {styles[key]!r} and {label!r} are drawn alike")
            styles[key] = label
        problems += _out_of_range(ax)
    return problems


def _out_of_range(ax) -> list[str]:
    """Intervals (bands, error bars) of ``ax`` outside its quantity's range."""
    lo, hi = bounds(ax.get_ylabel())  # "accuracy ...", or the metric plot's column
    found = []
    for artist in ax.collections:
        if isinstance(artist, PolyCollection):
            ys = [p.vertices[:, 1] for p in artist.get_paths()]
        elif isinstance(artist, LineCollection):
            ys = [np.asarray(s)[:, 1] for s in artist.get_segments()]
        else:
            continue
        values = np.concatenate(ys) if ys else np.array([])
        values = values[np.isfinite(values)]
        if len(values) and (values.min() < lo - 1e-12 or values.max() > hi + 1e-12):
            found.append(f"{ax.get_ylabel()!r}: an interval reaches outside [{lo:g}, {hi:g}]")
    return found


def _at_least_a_tenth(ax) -> None:
    """Accuracy limits spanning at least 0.1 within [0, 1]: tick labels of two decimals,
    which the fixed left margin holds (a flat curve's 0.10125 did not fit)."""
    low, high = ax.get_ylim()
    if high - low < 0.1:
        low = min(max(0.0, (low + high) / 2 - 0.05), 0.9)
        ax.set_ylim(low, low + 0.1)


def plot_accuracy(
    rounds: pd.DataFrame,
    path: Path,
    title: str,
    assumed: bool = False,
    write: Callable[[Path, Callable[[Path], None]], None] | None = None,
) -> None:
    """Accuracy (generic and personalized) against simulated time, saved as PNG and SVG
    (``write``: see :func:`save_figure`).

    ``assumed``: a cost-only run's accuracy, read off ``execution.accuracy_curve``:
    drawn dashed and labelled as assumed. ``title``'s lines are wrapped to fit.
    """
    fig, ax = plt.subplots(figsize=(6, 4))
    curves = (
        [("generic_acc", "assumed (execution.accuracy_curve)")]
        if assumed
        else [
            ("generic_acc", "generic (global test)"),
            ("personal_acc", "personalized (local tests)"),
        ]
    )
    for index, (column, label) in enumerate(curves):
        data = rounds[["t_end", column]].dropna()
        if not data.empty:
            style = line_style(index + (1 if assumed else 0), len(data))
            ax.plot(data["t_end"], data[column], label=label, **style)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("accuracy")
    _at_least_a_tenth(ax)
    text = "\n".join(wrapped(part, 62) for part in title.split("\n"))
    ax.set_title(text, fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # cost-only runs without a curve have no accuracy
        ax.legend(fontsize=8)
    # fixed margins (a draw for the layout engine was a quarter of writing the quickstart's
    # run directory); the title's lines make room for themselves
    lines = text.count("\n") + 1
    fig.subplots_adjust(left=0.11, right=0.96, bottom=0.12, top=0.93 - 0.045 * (lines - 1))
    save_figure(fig, path, ("png",), dpi=120, write=write)
