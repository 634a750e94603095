"""Scenario -> built world -> simulation -> tables -> run directory.

This is the Python API behind ``mecsim run``; :func:`run` returns the run's
tables as pandas DataFrames. Building the world is :mod:`mecsim.runs.world`'s job,
turning a finished simulation into tables :mod:`mecsim.runs.tables`'; this module
claims the target, wires executor, checkpoint and progress bar, and writes.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm import tqdm

from mecsim.common import interrupts
from mecsim.common.errors import ConfigError
from mecsim.common.gc_pause import paused_gc
from mecsim.common.threads import apply_threads
from mecsim.config.scenario import Scenario, load_scenario, resolved_toml
from mecsim.engine.checkpoint import (
    Checkpointer,
    CheckpointMismatch,
    ReplayEvaluator,
    ReplayingExecutor,
    checkpoint_path,
    load_checkpoint,
    scenario_digest,
)
from mecsim.engine.evaluation import Evaluator
from mecsim.engine.simulation import Simulation
from mecsim.executors import Executor, TrainingContext, make_executor
from mecsim.executors.calibration import Calibration, calibrate
from mecsim.executors.cost_only import CostOnlyExecutor
from mecsim.policies.scheduling import SCHEDULERS
from mecsim.protocols import PROTOCOLS
from mecsim.runs.output import (
    atomic_directory,
    check_parent,
    check_target,
    claim_default_run_dir,
    claim_run_dir,
    finished,
    json_safe,
    release,
    write_file,
)
from mecsim.runs.tables import RunResult, tabulate
from mecsim.runs.world import Setup, World, build_world

if TYPE_CHECKING:  # pandas is imported once the run trains (see _import_writers_in_background)
    import pandas as pd

log = logging.getLogger(__name__)


def resolve_device(device: str | None) -> torch.device:
    """The torch device to train on; ``cuda`` must be available if asked for."""
    name = device or "cpu"
    if name not in ("cpu", "cuda"):
        raise ConfigError("--device", f"unknown device {name!r}; allowed: cpu, cuda")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "--device", "cuda was requested but no CUDA device is available; use --device cpu"
        )
    return torch.device(name)


def check_run(scenario: Scenario, out: str | Path | None = None) -> None:
    """Every check ``run`` makes before any work, without running or writing: the output
    location, then building the world (clients, links, data, partition, models)."""
    if out is not None:
        check_target(Path(out), scenario.output.overwrite)
    else:
        name = scenario.output.name or f"{scenario.name}-seed{scenario.seed}"
        check_parent(Path(scenario.output.dir) / name)
    build_world(scenario, torch.device("cpu"))


def plan_executor(
    sc: Scenario,
    ctx: TrainingContext,
    name: str | None,
    num_classes: int,
    most_samples: int | None = None,
) -> tuple[str, Calibration | None]:
    """The executor that runs (``cost_only``, or the requested one with ``auto`` resolved)
    and, for ``auto`` and an uncapped ``batched``, the probe that decided and sized it
    (probing the batch a step really takes: at most ``most_samples``, the largest
    client's training set, as training takes no more)
    (:mod:`mecsim.executors.calibration`)."""
    if sc.execution.cost_only:
        return "cost_only", None
    requested = name or sc.execution.executor
    if requested not in ("auto", "batched") or (
        requested == "batched" and sc.execution.max_batch_clients is not None
    ):
        return requested, None
    budget = sc.execution.memory_budget_gb
    batch = int(getattr(sc.algorithm, "batch_size", 16))
    calibration = calibrate(
        ctx.functions[ctx.models.default_name],
        tuple(ctx.data["train"][0].shape[1:]),
        num_classes,
        batch if most_samples is None else min(batch, most_samples),
        sc.protocol.round_size(sc.clients.count),
        ctx.device,
        requested,
        None if budget is None else int(budget * 2**30),
    )
    return calibration.executor, calibration


def build_executor(
    sc: Scenario, ctx: TrainingContext, name: str, calibration: Calibration | None = None
) -> Executor:
    """The executor named by :func:`plan_executor`, batched groups capped by its probe."""
    if name == "cost_only":
        return CostOnlyExecutor(ctx)
    if name == "ray":
        e = sc.execution
        return make_executor(
            "ray",
            ctx,
            address=e.ray_address,
            num_cpus=e.ray_num_cpus,
            gpus_per_task=e.ray_gpus_per_task,
            tasks=e.ray_tasks,
            inner=e.ray_inner,
            max_clients=e.max_batch_clients,
        )
    if name == "batched":
        cap = sc.execution.max_batch_clients
        if cap is None and calibration is not None:
            cap = calibration.max_clients
        return make_executor(name, ctx, max_clients=cap)
    return make_executor(name, ctx)


def check_resumable(out: str | Path | None, write: bool) -> None:
    """Refuse a ``--resume`` with nothing to continue (no run directory, a finished run)."""
    if not write:
        raise ConfigError("--resume", "resume continues a run directory; it needs write=True")
    if out is not None and finished(Path(out)):
        raise ConfigError(
            "--resume",
            f"{out} holds a finished run, nothing to continue: run without --resume into "
            "another --out (or set output.overwrite = true to run it again)",
        )


def run(
    scenario: str | Path | dict[str, Any] | Scenario,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    out: str | Path | None = None,
    device: str | None = None,
    executor: str | None = None,
    write: bool = True,
    progress: bool | None = None,
    resume: bool = False,
) -> RunResult:
    """Run a scenario end to end (what ``mecsim run`` does); exported as ``mecsim.run``.

    Args:
        scenario: a TOML path, a mapping, or a :class:`~mecsim.config.scenario.Scenario`.
        overrides: dotted ``key=value`` strings (or a mapping) applied before validation,
            e.g. ``["protocol.rounds=5", "algorithm.name=ditto"]``.
        out: run directory; default ``<output.dir>/<name>-seed<seed>`` (suffixed if taken).
        device: ``cpu`` (default) or ``cuda`` for the real training.
        executor: client-job backend (``auto``, ``serial``, ``batched``, ``ray``); default
            ``execution.executor``.
        write: write the run directory (False: only return the tables).
        progress: show a progress bar (default: ``output.progress``).
        resume: continue the interrupted run into the same directory from its
            checkpoint (see :mod:`mecsim.engine.checkpoint`); the tables equal an
            uninterrupted run's except the wall-clock columns.

    Returns:
        A :class:`RunResult`: ``events``, ``rounds`` and ``clients`` (pandas
        DataFrames), ``summary`` (as in ``summary.json``), ``run_dir``.

    Raises:
        mecsim.common.errors.MecsimError: bad input, named by its field, before any work.
    """
    sc = load_scenario(scenario, overrides)
    if resume:
        check_resumable(out, write)
    run_dir = None
    if write:  # claim the target before any work: no other run can take it meanwhile
        if out is not None:
            run_dir = claim_run_dir(Path(out), sc.output.overwrite)
        else:
            name = sc.output.name or f"{sc.name}-seed{sc.seed}"
            run_dir = claim_default_run_dir(sc.output.dir, name)
    try:
        return _run(
            sc,
            run_dir,
            device=device,
            executor=executor,
            write=write,
            progress=progress,
            resume=resume,
        )
    finally:
        if run_dir is not None:
            release(run_dir)


@dataclass
class Resume:
    """Where a run's checkpoint lives and what it saved (None: starting over)."""

    path: Path
    digest: str
    saved: dict[str, Any] | None


def _run(
    sc: Scenario,
    run_dir: Path | None,
    *,
    device: str | None,
    executor: str | None,
    write: bool,
    progress: bool | None,
    resume: bool = False,
) -> RunResult:
    """Build everything and simulate (``run`` after the target is claimed)."""
    torch_device = resolve_device(device)
    if sc.execution.cost_only and sc.execution.threads == "auto":  # no CPUs to sample
        threads = torch.get_num_threads()
    else:
        threads = apply_threads(sc.execution.threads)  # before torch's first kernel
    checkpoint = None
    if run_dir is not None:  # checkpoints sit beside the run directory until it is written
        path = checkpoint_path(run_dir)
        digest = scenario_digest(sc.model_dump(mode="json"))
        saved = load_checkpoint(path, digest) if resume else None  # refused before any work
        if saved is None and path.exists():
            log.info("%s: starting over; add --resume to continue the interrupted run", path)
        checkpoint = Resume(path, digest, saved)
    with paused_gc():  # millions of objects for a million clients, and no cycles
        world = build_world(sc, torch_device)
        most = max((i.shape[0] for i in world.data.train), default=1)
        executor_used, calibration = plan_executor(
            sc, world.ctx, executor, world.data.num_classes, most
        )
        setup = Setup(
            torch_device, threads, executor_used, executor or sc.execution.executor, calibration
        )
        sim = build_simulation(sc, world, setup, checkpoint)
    simulate(sc, sim, run_dir, progress)
    with paused_gc():
        result = tabulate(sc, world, setup, sim, run_dir)
    interrupts.raise_pending()  # a stop swallowed after the last round: nothing is written
    if write:
        assert run_dir is not None
        write_run_directory(result, run_dir)
        if sim.checkpointer is not None:
            sim.checkpointer.path.unlink(missing_ok=True)
        log.info("wrote %s", run_dir)
    return result


def build_simulation(
    sc: Scenario, world: World, setup: Setup, checkpoint: Resume | None
) -> Simulation:
    """The executor (recording, or replaying a checkpoint), the evaluator and the
    :class:`Simulation` of a built world, before its first event."""
    job_executor = build_executor(sc, world.ctx, setup.executor, setup.calibration)
    if checkpoint is not None:  # after the probe, whose timings a busy thread would disturb
        _import_writers_in_background()
    evaluator: Any = world.evaluator
    if isinstance(evaluator, Evaluator) and setup.executor == "batched":
        # personalized models in stacked groups: on a GPU always, on a CPU when faster
        evaluator.batched = True if setup.device.type == "cuda" else None
    checkpointer = None
    if checkpoint is not None:
        job_executor = ReplayingExecutor(job_executor, record=not sc.execution.cost_only)
        saved = checkpoint.saved
        if saved is not None:
            job_executor.replay(saved["log"], CostOnlyExecutor(world.ctx))
            evaluator = ReplayEvaluator(world.evaluator)
            log.info("replaying the first %d rounds without training", saved["rounds_done"])
        out = sc.output
        checkpointer = Checkpointer(
            checkpoint.path, checkpoint.digest, out.checkpoint_every, out.checkpoint_minutes, saved
        )
    evaluation = sc.evaluation
    devices = sc.device_catalog()
    return Simulation(
        algorithm=world.ctx.algorithm,
        executor=job_executor,
        network=world.network,
        clients=world.clients,
        indices=[world.data.client_indices(c) for c in range(sc.clients.count)],
        server_device=devices.get(sc.server.device),
        devices=devices,
        evaluator=evaluator,
        protocol=sc.protocol,
        seed=sc.seed,
        training=world.ctx,
        public_nbytes=world.public_nbytes,
        faults=world.faults,
        checkpointer=checkpointer,
        bulk_rounds=sc.execution.bulk_rounds,
        new_clients=evaluation.new_clients,
        new_client_adaptation=evaluation.new_client_adaptation,
        new_client_epochs=evaluation.new_client_epochs,
        scheduler=SCHEDULERS.get(sc.scheduling.policy)(sc.scheduling),
    )


def simulate(sc: Scenario, sim: Simulation, run_dir: Path | None, progress: bool | None) -> None:
    """Run the protocol to its end, with a progress bar; keep the checkpoint of an
    interrupted run and say how to resume it."""
    show = sc.output.progress if progress is None else progress
    checkpointer = sim.checkpointer
    with tqdm(total=sc.protocol.rounds, desc=sc.name, unit="round", disable=not show) as bar:

        def on_round(row: dict[str, Any]) -> None:
            acc = (
                row["generic_acc"]
                if row["generic_acc"] == row["generic_acc"]
                else row["personal_acc"]
            )
            bar.set_postfix(round=row["round"], sim_s=f"{row['t_end']:.1f}", acc=f"{acc:.3f}")
            bar.update()
            interrupts.raise_pending()  # a signal's stop that a weakref callback swallowed

        sim.on_round = on_round
        try:
            sim.run(PROTOCOLS.get(sc.protocol.kind))
        except BaseException:
            if checkpointer is not None and checkpointer.path.exists():
                log.warning(
                    "kept the checkpoint after round %d (%s): continue with --resume and the "
                    "same --out %s",
                    checkpointer.saved_rounds,
                    checkpointer.path,
                    run_dir,
                )
            raise
    if checkpointer is not None and checkpointer.replaying:
        raise CheckpointMismatch(f"the replay never reached round {checkpointer.resume_round}")
    close = getattr(sim.executor, "close", None)
    if close is not None:
        close()


def _import_writers_in_background() -> None:
    """Import what the tables and writing the run directory need (pandas, matplotlib,
    pyarrow's Parquet writer: 0.5-0.6 s) on a daemon thread while the run trains: torch
    kernels release the GIL, and start-up does not wait for them."""

    def load() -> None:
        import pandas  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        import mecsim.analysis.plots  # noqa: F401

    threading.Thread(target=load, name="mecsim-import-writers", daemon=True).start()


def write_run_directory(result: RunResult, run_dir: Path) -> None:
    """Write every output file of a run into ``run_dir`` atomically."""
    from mecsim.analysis import render_report
    from mecsim.analysis.plots import plot_accuracy

    with atomic_directory(run_dir, overwrite=result.scenario.output.overwrite) as tmp:
        write_file(
            tmp / "scenario.resolved.toml", lambda p: p.write_text(resolved_toml(result.scenario))
        )
        for name in ("events", "rounds", "clients", "decisions"):
            table: pd.DataFrame | None = getattr(result, name)
            if table is None:
                continue
            write_file(tmp / f"{name}.parquet", lambda p, t=table: t.to_parquet(p, index=False))
            if name not in ("events", "decisions") or result.scenario.output.events_csv:
                write_file(tmp / f"{name}.csv", lambda p, t=table: t.to_csv(p, index=False))
        write_file(
            tmp / "summary.json",
            lambda p: p.write_text(
                json.dumps(json_safe(result.summary), indent=2, allow_nan=False) + "\n"
            ),
        )
        write_file(
            tmp / "report.md",
            lambda p: p.write_text(render_report(result.scenario.name, result.summary)),
        )
        source = result.summary["accuracy_source"]
        # a cost-only run without a curve has no accuracy to plot
        if source != "none" and result.scenario.output.figures:
            sc = result.scenario
            title = (
                f"{sc.algorithm.name} / {sc.protocol.kind}\n"
                f"scenario {sc.name}, seed {sc.seed}, run {run_dir.name}"
            )
            assumed = source == "assumed"
            plot_accuracy(result.rounds, tmp / "accuracy.png", title, assumed, write_file)
