"""``mecsim compare`` and ``mecsim report``: tables across run directories.

``compare`` (after an optional sweep) writes ``compare.md`` and
``compare.csv`` (a column per swept setting, time to target, speedups, idle
time, energy, bytes), ``compare_seeds.csv`` (seed means and confidence
intervals), ``curves`` (accuracy against simulated time, a band over seeds),
``gantt`` (the slowest clients of chosen rounds), ``metric`` (a column
against a swept setting) and ``report.html``. ``report`` writes KAPC's cost
tables (``report.md``, ``time.csv``, ``cost.csv``, ``layers.csv``,
``layers.png``), the runs' totals (``totals.csv``: ``compare.csv``'s columns; time,
energy, bytes, backhaul, handovers and new clients in ``report.md``) and ``report.html``. Both write one directory, atomically.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mecsim.analysis.columns import glossary
from mecsim.analysis.compare import (
    RunRecord,
    aggregate_seeds,
    baseline_setting,
    compare_runs,
    default_baseline,
    distinguish,
    has_setting,
    load_run,
    variant_groups,
    varying_keys,
)
from mecsim.analysis.compare_markdown import render_markdown, render_seeds
from mecsim.analysis.html_report import render_html
from mecsim.common.errors import ConfigError
from mecsim.runs.output import atomic_directory, write_file

log = logging.getLogger(__name__)


def layer_bytes(settings: dict[str, Any]) -> list[int] | None:
    """Bytes of each layer of a run's architecture (None: mixed architectures)."""
    from mecsim.learning.data import dataset_shape
    from mecsim.learning.models import build_model
    from mecsim.learning.models.layers import model_layers

    name = settings.get("model.name")
    if not isinstance(name, str):
        return None
    shape, classes = dataset_shape(settings["data.dataset"])
    model = build_model(name, input_shape=shape, num_classes=classes, seed=0)
    tensors = dict(model.state_dict())
    return [
        sum(tensors[k].nbytes for k in (*layer.param_names, *layer.buffer_names))
        for layer in model_layers(model)
    ]


def report(run_dirs: Sequence[str | Path], out: str | Path, overwrite: bool = False) -> str:
    """KAPC's cost tables (Tables 5 and 6, Fig. 8) across runs, written into ``out``;
    returns the Markdown."""
    from mecsim.analysis.compare_markdown import (
        costs_section,
        edges_section,
        new_clients_section,
    )
    from mecsim.analysis.cost_report import (
        cost_table,
        plot_layers,
        render,
        time_table,
        uploaded_layers,
    )

    records = [load_run(d) for d in run_dirs]
    distinguish(records)
    time, cost = time_table(records), cost_table(records)
    totals = compare_runs(records, [], None)
    depths = {}
    for record in records:
        sizes = layer_bytes(record.settings)
        if sizes is not None:
            series = uploaded_layers(record.events, sizes)
            if series.notna().all() and len(series):
                depths[record.label] = series
    layers = pd.DataFrame(depths)
    layers.index.name = "round"
    markdown = render(time, cost, layers)
    for section in (costs_section, edges_section, new_clients_section):
        markdown += "\n".join(section(totals)) + "\n"
    with atomic_directory(Path(out), overwrite=overwrite) as tmp:
        write_file(tmp / "report.md", lambda p: p.write_text(markdown))
        write_file(tmp / "time.csv", lambda p: time.to_csv(p, index=False))
        write_file(tmp / "cost.csv", lambda p: cost.to_csv(p, index=False))
        write_file(tmp / "totals.csv", lambda p: totals.to_csv(p, index=False))
        shown = []
        if not layers.empty:
            write_file(tmp / "layers.csv", lambda p: layers.to_csv(p))
            plot_layers(layers, tmp / "layers.png", write_file)
            shown.append(("layers uploaded per round (KAPC Fig. 8)", tmp / "layers.png"))
        for record, run_dir in zip(records, run_dirs, strict=True):
            if (Path(run_dir) / "accuracy.png").is_file():
                shown.append((f"{record.label}: accuracy", Path(run_dir) / "accuracy.png"))
        write_file(
            tmp / "report.html",
            lambda p: p.write_text(render_html("mecsim cost report", markdown, shown)),
        )
    return markdown


def check_baseline(records: Sequence[RunRecord], baseline: str) -> None:
    """Refuse a ``--baseline KEY=VALUE`` that names no setting of the runs, or a value no
    run has, naming the choices (else every speedup would silently be NaN)."""
    key, value = baseline_setting(baseline)
    present = {str(r.settings[key]) for r in records if key in r.settings}
    if not present:
        choices = (
            varying_keys(list(records)) or sorted({k for r in records for k in r.settings})[:12]
        )
        raise ConfigError(
            "--baseline",
            f"{key!r} is no setting of these runs; choose one of: {', '.join(choices)}",
        )
    if not any(has_setting(r, key, value) for r in records):
        raise ConfigError(
            "--baseline",
            f"no run has {key} = {value!r}; the runs have {', '.join(sorted(present))}",
        )


def resolve_baseline(records: Sequence[RunRecord], baseline: str | None) -> str | None:
    """The baseline a comparison uses: ``baseline`` checked (:func:`check_baseline`), or
    when None the default (:func:`~mecsim.analysis.compare.default_baseline`), said in a
    line."""
    if baseline is not None:
        check_baseline(records, baseline)
        return baseline
    chosen = default_baseline(list(records))
    if chosen is None:
        log.info(
            "no speedups: no setting but the seed tells the runs apart (--baseline KEY=VALUE sets one)"
        )
    else:
        log.info("speedups over %s, every other setting equal (--baseline picks another)", chosen)
    return chosen


@dataclass
class Figures:
    """What ``mecsim compare`` draws: formats, the metric plot, the Gantt's selection."""

    formats: Sequence[str] = ("png",)
    x: str | None = None
    """A swept numeric setting: plot ``y`` against it (``metric.<fmt>``)."""
    y: str = "pm_time_0.8"
    gantt_clients: Sequence[int] | None = None
    """Clients in the Gantt (None: the ``gantt_slowest`` slowest of each run)."""
    gantt_slowest: int = 4
    gantt_rounds: Sequence[int] = (0, 1, 2)


def metric_column(name: str) -> str:
    """A ``--y`` name as a comparison column: ``time_to_0.8`` means ``pm_time_0.8``,
    ``gm_time_to_0.8`` means ``gm_time_0.8``; other names are columns already."""
    if name.startswith("time_to_"):
        return "pm_time_" + name.removeprefix("time_to_")
    if name.startswith("gm_time_to_"):
        return "gm_time_" + name.removeprefix("gm_time_to_")
    return name


def check_figures(figures: Figures, columns: Sequence[str], settings: Sequence[str]) -> None:
    """Refuse a ``--y`` that is no comparison column or an ``--x`` that is no setting."""
    if figures.x is None:
        return
    if figures.x not in settings:
        near = difflib.get_close_matches(figures.x, settings, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise ConfigError("--x", f"{figures.x!r} is not a scenario key{hint}")
    if metric_column(figures.y) not in columns:
        numeric = ", ".join(c for c in columns if c not in ("run", "algorithm", "protocol"))
        raise ConfigError("--y", f"{figures.y!r} is not a comparison column; choose from {numeric}")


def compare(
    run_dirs: Sequence[str | Path],
    targets: Sequence[float],
    out: str | Path,
    overwrite: bool = False,
    baseline: str | None = None,
    figures: Figures | None = None,
) -> pd.DataFrame:
    """Compare finished runs and write the comparison files into ``out``; speedups are over
    each run's ``baseline`` (``KEY=VALUE``, every other setting equal; None: the default,
    :func:`resolve_baseline`)."""
    from mecsim.analysis.figures import plot_curves, plot_metric
    from mecsim.analysis.gantt import plot_gantt

    figures = figures or Figures()
    records = [load_run(d) for d in run_dirs]
    distinguish(records)
    baseline = resolve_baseline(records, baseline)
    table = compare_runs(records, list(targets), baseline)
    if figures.x is not None:
        check_figures(
            figures, list(table.columns), sorted({k for r in records for k in r.settings})
        )
        if figures.x not in table:
            raise ConfigError("--x", f"{figures.x} has one value in these runs; sweep it first")
        if not pd.api.types.is_numeric_dtype(table[figures.x]):
            raise ConfigError("--x", f"{figures.x} is not numeric; plot a numeric setting")
    seeds = aggregate_seeds(records, table)
    groups = variant_groups(records)
    tables = render_markdown(table, list(targets), baseline, columns=False)
    if (seeds["n"] > 1).any():
        tables += render_seeds(seeds, list(targets))
    columns = "\n".join(glossary(list(table.columns))) + "\n"  # after the figures in HTML
    markdown = tables + columns
    with atomic_directory(Path(out), overwrite=overwrite) as tmp:
        write_file(tmp / "compare.csv", lambda p: table.to_csv(p, index=False))
        write_file(tmp / "compare.md", lambda p: p.write_text(markdown))
        if (seeds["n"] > 1).any():
            write_file(tmp / "compare_seeds.csv", lambda p: seeds.to_csv(p, index=False))
        plot_curves(
            [(label, [records[i].rounds for i in rows]) for label, rows in groups],
            tmp / "curves",
            targets,
            figures.formats,
            assumed=[
                records[rows[0]].summary.get("accuracy_source") == "assumed" for _, rows in groups
            ],
        )
        plot_gantt(
            [(r.label, r.events, r.rounds) for r in records],
            tmp / "gantt",
            clients=figures.gantt_clients,
            slowest=figures.gantt_slowest,
            rounds=figures.gantt_rounds,
            formats=figures.formats,
        )
        if figures.x is not None:
            plot_metric(
                table,
                figures.x,
                metric_column(figures.y),
                tmp / "metric",
                figures.formats,
                varying_keys(records),
            )
        inline = next((f for f in ("png", "svg") if f in figures.formats), None)  # not pdf
        shown = [
            (caption, tmp / f"{stem}.{inline}")
            for stem, caption in (
                ("curves", "accuracy against simulated time"),
                ("metric", f"{figures.y} against {figures.x}"),
                ("gantt", "timelines of the chosen rounds"),
            )
            if inline is not None and (tmp / f"{stem}.{inline}").is_file()
        ]
        write_file(
            tmp / "report.html",
            lambda p: p.write_text(render_html("mecsim comparison", tables, shown, columns)),
        )
    return table
