"""``mecsim compare`` and ``mecsim report``: tables across run directories.

``compare`` (after an optional sweep) writes ``compare.md`` and
``compare.csv`` (time to target, speedups, idle time, energy, bytes),
``curves.png`` (accuracy against simulated time, all runs) and ``gantt.png``
(a few rounds per client per run). ``report`` writes KAPC's cost tables
(``report.md``, ``time.csv``, ``cost.csv``, ``layers.csv`` and
``layers.png``). Both write one directory, atomically.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from mecsim.analysis.compare import (
    DEFAULT_BASELINE,
    aggregate_seeds,
    compare_runs,
    distinguish,
    load_run,
    render_markdown,
    render_seeds,
)
from mecsim.analysis.timeline import plot_curves, plot_gantt
from mecsim.errors import ConfigError
from mecsim.output import atomic_directory, write_file
from mecsim.scenario import Scenario, apply_overrides, load_scenario, read_scenario_file

log = logging.getLogger(__name__)


def sweep_points(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep's values, as override mappings (in key order)."""
    keys = list(sweep)
    return [
        dict(zip(keys, values, strict=True))
        for values in itertools.product(*(sweep[k] for k in keys))
    ]


def _value_text(value: Any) -> str:
    """A value as folder-name text: ``{dist="uniform", low=1}`` -> ``dist-uniform_low-1``."""
    if isinstance(value, dict):
        return "_".join(f"{k}-{_value_text(v)}" for k, v in sorted(value.items()))
    if isinstance(value, list):
        return "-".join(_value_text(v) for v in value)
    return re.sub(r"[^A-Za-z0-9.+-]", "_", str(value))


def point_names(points: list[dict[str, Any]], default: str) -> list[str]:
    """A folder name per sweep point, ``key=value`` joined by ``__`` (the key's last part
    unless two of a point's keys share it); refuses two points with the same name."""
    names = []
    for point in points:
        tails = [k.split(".")[-1] for k in point]
        parts = [
            f"{tail if tails.count(tail) == 1 else key}={_value_text(value)}"
            for key, tail, value in zip(point, tails, point.values(), strict=True)
        ]
        names.append("__".join(parts) or default)
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            raise ConfigError(
                "compare.sweep",
                f"sweep points {points[seen[name]]} and {points[index]} are the same run "
                f"({name}); remove one",
            )
        seen[name] = index
    return names


def run_sweep(
    scenario: str | Path | dict | Scenario,
    overrides: list[str] | None,
    sweep: dict[str, list[Any]] | None,
    runs_dir: Path,
    **run_options: Any,
) -> list[Path]:
    """Run every point of ``scenario``'s sweep (crossed with ``[compare] runs``); return the
    run directories (``runs_dir/<point>``)."""
    from mecsim.runner import run

    # sweep over the user's own keys (not the resolved defaults, which would carry
    # one algorithm's settings into another's run)
    data = read_scenario_file(scenario) if isinstance(scenario, (str, Path)) else scenario
    if isinstance(data, Scenario):
        data = data.model_dump(mode="json", exclude_none=True)
    data = apply_overrides(data, overrides or [])
    base = load_scenario(data)
    sweep = sweep or base.compare.sweep
    points = sweep_points(sweep) if sweep else [{}]
    if base.compare.runs:
        points = [point | extra for point in points for extra in base.compare.runs]
    if base.compare.seeds:
        points = [point | {"seed": seed} for point in points for seed in base.compare.seeds]
    for point in points:  # every point is valid before the first run starts
        load_scenario(data, point)
    names = point_names(points, base.name)
    dirs = []
    for point, name in zip(points, names, strict=True):
        out = runs_dir / name
        log.info("running %s", name)
        run(data, point, out=out, **run_options)
        dirs.append(out)
    return dirs


def layer_bytes(settings: dict[str, Any]) -> list[int] | None:
    """Bytes of each layer of a run's architecture (None: mixed architectures)."""
    from mecsim.data import dataset_shape
    from mecsim.models import build_model
    from mecsim.models.layers import model_layers

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
    with atomic_directory(Path(out), overwrite=overwrite) as tmp:
        write_file(tmp / "report.md", lambda p: p.write_text(markdown))
        write_file(tmp / "time.csv", lambda p: time.to_csv(p, index=False))
        write_file(tmp / "cost.csv", lambda p: cost.to_csv(p, index=False))
        if not layers.empty:
            write_file(tmp / "layers.csv", lambda p: layers.to_csv(p))
            write_file(tmp / "layers.png", lambda p: plot_layers(layers, p))
    return markdown


def compare(
    run_dirs: Sequence[str | Path],
    targets: Sequence[float],
    out: str | Path,
    overwrite: bool = False,
    baseline: str = DEFAULT_BASELINE,
) -> pd.DataFrame:
    """Compare finished runs and write the comparison files into ``out``; speedups are over
    each run's ``baseline`` (``KEY=VALUE``, every other setting equal)."""
    records = [load_run(d) for d in run_dirs]
    distinguish(records)
    table = compare_runs(records, list(targets), baseline)
    seeds = aggregate_seeds(records, table)
    markdown = render_markdown(table, list(targets))
    if (seeds["n"] > 1).any():
        markdown += render_seeds(seeds, list(targets))
    with atomic_directory(Path(out), overwrite=overwrite) as tmp:
        write_file(tmp / "compare.csv", lambda p: table.to_csv(p, index=False))
        write_file(tmp / "compare.md", lambda p: p.write_text(markdown))
        if (seeds["n"] > 1).any():
            write_file(tmp / "compare_seeds.csv", lambda p: seeds.to_csv(p, index=False))
        write_file(
            tmp / "curves.png", lambda p: plot_curves([(r.label, r.rounds) for r in records], p)
        )
        write_file(
            tmp / "gantt.png", lambda p: plot_gantt([(r.label, r.events) for r in records], p)
        )
    return table
