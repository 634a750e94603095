"""The Python API beyond ``mecsim.run``: load a run directory, compare runs, run a sweep.

Each returns pandas DataFrames, so an experiment is a few lines::

    import mecsim

    table = mecsim.sweep(
        "scenarios/quickstart.toml",
        {"protocol.kind": ["compute_and_wait", "wait_free"]},
        out="runs/protocols",
        overrides=["protocol.rounds=10"],
        seeds=[0, 1],
    )
    print(table[["run", "seed", "pm_time_0.8", "pm_speedup_0.8"]])
    run = mecsim.load("runs/protocols/runs/kind=wait_free__seed=0")
    run.rounds.plot(x="t_end", y="personal_acc")
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mecsim.common.errors import MecsimError

if TYPE_CHECKING:
    import pandas as pd

    from mecsim.runs.runner import RunResult

log = logging.getLogger(__name__)
DEFAULT_TARGETS = (0.4, 0.8)


def load(run_dir: str | Path) -> RunResult:
    """A run directory written by ``mecsim run`` as a :class:`~mecsim.runs.runner.RunResult`:
    ``events``, ``rounds``, ``clients`` DataFrames, ``summary`` and the ``scenario``."""
    import pandas as pd

    from mecsim.analysis.compare import load_run
    from mecsim.config.scenario import load_scenario
    from mecsim.runs.runner import RunResult

    run_dir = Path(run_dir)
    record = load_run(run_dir)  # checks the directory: one clear error if it is not a run
    try:
        clients = pd.read_parquet(run_dir / "clients.parquet")
        import tomllib

        resolved = tomllib.loads((run_dir / "scenario.resolved.toml").read_text("utf-8"))
        resolved.pop("versions", None)
        scenario = load_scenario(resolved)
    except (OSError, ValueError) as error:
        raise MecsimError(f"{run_dir} cannot be read ({error}); is it complete?") from None
    return RunResult(scenario, record.events, record.rounds, clients, dict(record.summary), run_dir)


def compare(
    run_dirs: Sequence[str | Path],
    targets: Sequence[float] = DEFAULT_TARGETS,
    *,
    out: str | Path | None = None,
    baseline: str | None = None,
    overwrite: bool = False,
) -> pd.DataFrame:
    """Compare finished runs (``mecsim compare``): one row per run with time to each
    target, speedups over each run's ``baseline`` (``KEY=VALUE``; None: see
    :func:`~mecsim.analysis.compare.default_baseline`), bytes and energy. The comparison
    files are written to ``out`` when given (replacing ones mecsim wrote there with
    ``overwrite``)."""
    from mecsim.commands.comparison import compare as compare_dirs

    if out is not None:
        return compare_dirs(list(run_dirs), list(targets), out, overwrite, baseline)
    with tempfile.TemporaryDirectory() as tmp:
        return compare_dirs(list(run_dirs), list(targets), Path(tmp) / "c", baseline=baseline)


def sweep_plan(
    scenario: str | Path,
    sweep: Mapping[str, Sequence[Any]] | None,
    out: str | Path,
    *,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    seeds: Sequence[int] = (),
    zip_axes: bool = False,
    resume: bool = False,
):
    """The checked plan of a sweep (``mecsim compare --scenario``): the scenario file with
    ``overrides``; ``sweep`` (key -> values) replaces the file's ``[compare] sweep`` and
    its ``[[compare.runs]]``; every point is validated before any run."""
    from mecsim.commands.sweeps import axis, plan_sweep
    from mecsim.config.scenario import apply_overrides, load_scenario, read_scenario_file

    data = apply_overrides(read_scenario_file(scenario), overrides)
    if seeds:
        data = apply_overrides(data, {"compare.seeds": list(seeds)})
    base = load_scenario(data)
    if sweep and base.compare.runs:  # the rule: the caller's sweep replaces them
        log.info(
            "the sweep replaces the scenario's [compare] sweep and its %d [[compare.runs]]; "
            "name them in the sweep to keep them",
            len(base.compare.runs),
        )
        data = apply_overrides(data, {"compare.runs": []})
        base = load_scenario(data)
    axes_source = dict(sweep) if sweep else base.compare.sweep
    axes = [axis(key, list(values)) for key, values in axes_source.items()]
    mode = "zip" if zip_axes else base.compare.mode
    plan = plan_sweep(data, axes, Path(out) / "runs", mode=mode, resume=resume)
    return plan, base, axes_source


def sweep(
    scenario: str | Path,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    out: str | Path = "runs/sweep",
    *,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    seeds: Sequence[int] = (),
    targets: Sequence[float] | None = None,
    baseline: str | None = None,
    jobs: int = 1,
    resume: bool = False,
    device: str | None = None,
) -> pd.DataFrame:
    """Run every point of a sweep into ``out/runs`` and compare them into
    ``out/comparison``; returns the comparison table (see :func:`compare`)."""
    from mecsim.commands.sweeps import run_sweep

    plan, base, _ = sweep_plan(
        scenario, sweep, out, overrides=overrides, seeds=seeds, resume=resume
    )
    dirs = run_sweep(plan, jobs=jobs, resume=resume, device=device)
    targets = targets or base.compare.targets
    return compare(dirs, targets, out=Path(out) / "comparison", baseline=baseline, overwrite=resume)
