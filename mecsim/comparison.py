"""``mecsim compare``: run a sweep (optional) and compare run directories.

Writes ``compare.md`` and ``compare.csv`` (time to target, speedups, idle
time, energy, bytes), ``curves.png`` (accuracy against simulated time, all
runs) and ``gantt.png`` (a few rounds per client per run) into one directory,
atomically.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from mecsim.analysis.compare import compare_runs, distinguish, load_run, render_markdown
from mecsim.analysis.timeline import plot_curves, plot_gantt
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
    for point in points:  # every point is valid before the first run starts
        load_scenario(data, point)
    dirs = []
    for point in points:
        name = "-".join(str(v).replace("/", "_") for v in point.values()) or base.name
        out = runs_dir / name
        log.info("running %s", name)
        run(data, point, out=out, **run_options)
        dirs.append(out)
    return dirs


def compare(
    run_dirs: Sequence[str | Path],
    targets: Sequence[float],
    out: str | Path,
    overwrite: bool = False,
) -> pd.DataFrame:
    """Compare finished runs and write the comparison files into ``out``."""
    records = [load_run(d) for d in run_dirs]
    distinguish(records)
    table = compare_runs(records, list(targets))
    with atomic_directory(Path(out), overwrite=overwrite) as tmp:
        write_file(tmp / "compare.csv", lambda p: table.to_csv(p, index=False))
        write_file(
            tmp / "compare.md", lambda p: p.write_text(render_markdown(table, list(targets)))
        )
        write_file(
            tmp / "curves.png", lambda p: plot_curves([(r.label, r.rounds) for r in records], p)
        )
        write_file(
            tmp / "gantt.png", lambda p: plot_gantt([(r.label, r.events) for r in records], p)
        )
    return table
