"""Scenario -> built world -> simulation -> tables -> run directory.

This is the Python API behind ``mecsim run``; :func:`run` returns the run's
tables as pandas DataFrames.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm import tqdm

from mecsim import interrupts
from mecsim.algorithms import ALGORITHMS
from mecsim.checkpoint import (
    Checkpointer,
    CheckpointMismatch,
    ReplayEvaluator,
    ReplayingExecutor,
    checkpoint_path,
    load_checkpoint,
    scenario_digest,
)
from mecsim.client_table import out_of_range, range_text, read_client_table
from mecsim.data import build_client_data, dataset_shape, load_dataset
from mecsim.data.datasets import Dataset
from mecsim.data.federated import hold_out_public
from mecsim.data.partition import proportional_counts
from mecsim.devices import DEVICES
from mecsim.distributions import sample_attribute
from mecsim.errors import ConfigError
from mecsim.evaluation import CurveEvaluator, Evaluator
from mecsim.executors import Executor, TrainingContext, make_executor
from mecsim.executors.calibration import Calibration, calibrate
from mecsim.executors.cost_only import CostOnlyExecutor
from mecsim.faults import Faults
from mecsim.gc_pause import paused_gc
from mecsim.models import build_model, forward_flops_per_sample
from mecsim.models.catalog import Architecture, ModelCatalog
from mecsim.network import ClientProfile, Network
from mecsim.newcomers import FixedModels, newcomer_states
from mecsim.output import (
    atomic_directory,
    check_parent,
    check_target,
    claim_default_run_dir,
    claim_run_dir,
    json_safe,
    release,
    write_file,
)
from mecsim.protocols import PROTOCOLS
from mecsim.rng import derive_seed, numpy_rng
from mecsim.scenario import Scenario, load_scenario, resolved_toml
from mecsim.simulation import Simulation
from mecsim.state import payload_nbytes
from mecsim.threads import apply_threads
from mecsim.training import ModelFunction

if TYPE_CHECKING:  # pandas is imported once the run trains (see _import_writers_in_background)
    import pandas as pd

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """A finished run: its tables, summary, and where they were written (if anywhere)."""

    scenario: Scenario
    events: pd.DataFrame
    rounds: pd.DataFrame
    clients: pd.DataFrame
    summary: dict[str, Any]
    run_dir: Path | None = None
    server_state: dict[str, Any] = field(default_factory=dict)
    client_states: list[dict[str, Any]] = field(default_factory=list)


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


def build_clients(scenario: Scenario) -> list[ClientProfile]:
    """Sample each client's radio and device from the scenario's attribute streams."""
    cfg, n, seed = scenario.clients, scenario.clients.count, scenario.seed
    table = read_client_table(cfg.table) if cfg.table is not None else {}

    def attribute(key: str) -> np.ndarray:  # the table's column, else the scenario's draws
        if key in table:
            return table[key].to_numpy()
        return sample_attribute(getattr(cfg, key), numpy_rng(seed, "clients", key), n)

    distance, bandwidth = attribute("distance_m"), attribute("bandwidth_mhz")
    power, device = attribute("tx_power_dbm"), attribute("device")
    for key, values in (
        ("distance_m", distance),
        ("bandwidth_mhz", bandwidth),
        ("tx_power_dbm", power),
    ):
        bad = out_of_range(key, values)
        if len(bad):
            raise ConfigError(
                f"clients.{key}",
                f"sampled {float(values[bad[0]]):g} for client {int(bad[0])}; every value must "
                f"lie in {range_text(key)}: narrow the distribution",
            )
    devices = {name: DEVICES.get(name) for name in map(str, np.unique(device))}
    columns = zip(
        np.asarray(distance, float).tolist(),
        (np.asarray(bandwidth, float) * 1e6).tolist(),
        np.asarray(power, float).tolist(),
        map(str, np.asarray(device).tolist()),
        strict=True,
    )
    return [
        ClientProfile(id=i, distance_m=d, bandwidth_hz=b, tx_power_dbm=p, device=devices[name])
        for i, (d, b, p, name) in enumerate(columns)
    ]


def check_run(scenario: Scenario, out: str | Path | None = None) -> None:
    """Every check ``run`` makes before any work, without running or writing: the output
    location, then building the world (clients, links, data, partition, models)."""
    if out is not None:
        check_target(Path(out), scenario.output.overwrite)
    else:
        name = scenario.output.name or f"{scenario.name}-seed{scenario.seed}"
        check_parent(Path(scenario.output.dir) / name)
    build_world(scenario, torch.device("cpu"))


@dataclass
class FederatedData:
    """Tensors and per-client index splits a run trains and evaluates on."""

    input_shape: tuple[int, ...]
    num_classes: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    train: list[torch.Tensor]
    val: list[torch.Tensor]
    test: list[torch.Tensor]
    x_public: torch.Tensor
    y_public: torch.Tensor
    partition_redraws: int = 0
    """Partition draws rejected before every client had ``data.min_samples`` (Dirichlet)."""
    global_test_size: int | None = None
    """The first this many test samples are the global test set (the generic model's);
    clients' own local tests (``local_split = "own_data"``) follow them."""

    @cached_property
    def public_indices(self) -> torch.Tensor:
        """Every index of the shared public split: one tensor all clients share."""
        device = self.train[0].device if self.train else self.x_public.device
        if device.type == "meta":  # no values; arange would run a slow decomposition
            return torch.empty(len(self.x_public), dtype=torch.long, device=device)
        return torch.arange(len(self.x_public), device=device)

    def client_indices(self, client: int) -> dict[str, torch.Tensor]:
        """Client ``client``'s indices per split (``public`` indexes the shared public split)."""
        return {"train": self.train[client], "val": self.val[client], "public": self.public_indices}


def build_data(sc: Scenario, device: torch.device) -> FederatedData:
    """Load the dataset, partition it across clients, and move it to ``device``."""
    table_counts = sc.clients.table is not None and "num_samples" in read_client_table(
        sc.clients.table
    )
    if sc.execution.cost_only and (sc.clients.num_samples is not None or table_counts):
        return _sample_counts_only(sc)

    def load(name: str) -> Dataset:
        return load_dataset(
            name,
            root=sc.data.root,
            download=sc.data.download,
            num_clients=sc.clients.count,
            seed=sc.seed,
            test_fraction=sc.data.test_fraction,
            options={"alpha": sc.data.synthetic_alpha, "beta": sc.data.synthetic_beta},
        )

    dataset = load(sc.data.dataset)
    source = None
    if sc.data.public_dataset is not None and sc.data.public_size > 0:
        source = load(sc.data.public_dataset)  # same shape: checked with the scenario
    dataset, x_public, y_public = hold_out_public(dataset, sc.data.public_size, sc.seed, source)
    clients = build_client_data(
        dataset,
        partition=sc.data.partition,
        num_clients=sc.clients.count,
        seed=sc.seed,
        alpha=sc.data.alpha,
        classes_per_client=sc.data.classes_per_client,
        quantity_skew=sc.data.quantity_skew,
        lognormal_sigma=sc.data.lognormal_sigma,
        min_samples=sc.data.min_samples,
        val_fraction=sc.data.val_fraction,
        local_test_fraction=sc.data.local_test_fraction,
        local_split=sc.data.local_split,
        train_share_choices=tuple(sc.data.train_share_choices),
        own_test_share=sc.data.own_test_share,
    )
    dataset = dataset.to(device)
    x_test, y_test, tests = dataset.x_test, dataset.y_test, [c.test for c in clients]
    if clients.tests_from_train:  # local tests from the clients' own data follow the test set
        own = torch.cat(tests)
        x_test = torch.cat([x_test, dataset.x_train[own.to(device)]])
        y_test = torch.cat([y_test, dataset.y_train[own.to(device)]])
        starts = np.cumsum([len(dataset.y_test), *[len(t) for t in tests[:-1]]])
        tests = [int(s) + torch.arange(len(t)) for s, t in zip(starts, tests, strict=True)]
    return FederatedData(
        dataset.input_shape,
        dataset.num_classes,
        dataset.x_train,
        dataset.y_train,
        x_test,
        y_test,
        [c.train.to(device) for c in clients],
        [c.val.to(device) for c in clients],
        [t.to(device) for t in tests],
        x_public.to(device),
        y_public.to(device),
        clients.redraws,
        len(dataset.y_test),
    )


def sample_counts(sc: Scenario) -> np.ndarray:
    """Cost-only per-client training sample counts (``clients.num_samples``), checked."""
    table = read_client_table(sc.clients.table) if sc.clients.table is not None else None
    if table is not None and "num_samples" in table:
        return table["num_samples"].to_numpy().astype(np.int64)  # checked on reading
    counts = sample_attribute(
        sc.clients.num_samples, numpy_rng(sc.seed, "clients", "num_samples"), sc.clients.count
    )
    counts = np.asarray(counts, dtype=float)
    bad = out_of_range("num_samples", counts)
    if len(bad):
        raise ConfigError(
            "clients.num_samples",
            f"sampled {counts[bad[0]]:g} for client {int(bad[0])}; every client needs between "
            "1 and 1e9 samples: shift or narrow the distribution",
        )
    return counts.astype(np.int64)


def _sample_counts_only(sc: Scenario) -> FederatedData:
    """Cost-only data: per-client sample counts from ``clients.num_samples``, no tensors."""
    shape, classes = dataset_shape(sc.data.dataset)
    counts = sample_counts(sc)
    meta = torch.device("meta")
    empty = torch.empty(0, dtype=torch.long, device=meta)
    by_count = {  # clients with equal counts share one index tensor (shape only, no values)
        n: torch.empty(n, dtype=torch.long, device=meta) for n in np.unique(counts).tolist()
    }
    return FederatedData(
        shape,
        classes,
        torch.empty(0, *shape),
        torch.empty(0, dtype=torch.long),
        torch.empty(0, *shape),
        torch.empty(0, dtype=torch.long),
        [by_count[n] for n in counts.tolist()],
        [empty] * sc.clients.count,
        [empty] * sc.clients.count,
        torch.empty(sc.data.public_size, *shape, device=meta),
        torch.empty(sc.data.public_size, dtype=torch.long, device=meta),
    )


def assign_architectures(sc: Scenario, num_train: list[int], sizes: dict[str, int]) -> list[str]:
    """Each client's architecture name (``model.name`` and ``model.assign``).

    ``random`` draws from the choice per client (stream ``("clients", "model")``);
    ``data_size`` splits clients in the choice's proportions and gives the
    architectures with more parameters to the clients with more training data.
    """
    names = sc.model.names
    n = sc.clients.count
    if len(names) == 1:
        return names * n
    if sc.model.assign == "random":
        drawn = sample_attribute(sc.model.name, numpy_rng(sc.seed, "clients", "model"), n)
        return [str(v) for v in drawn]
    choice = sc.model.name
    values = [str(v) for v in choice.values]
    weights = np.ones(len(values)) if choice.weights is None else np.asarray(choice.weights)
    counts = proportional_counts(n, weights)
    ranked = sorted(range(len(values)), key=lambda i: -sizes[values[i]])
    clients = sorted(range(n), key=lambda c: (-num_train[c], c))
    assigned: list[str] = [""] * n
    position = 0
    for i in ranked:
        for c in clients[position : position + counts[i]]:
            assigned[c] = values[i]
        position += counts[i]
    return assigned


def build_models(
    sc: Scenario, data: FederatedData, device: torch.device, num_train: list[int]
) -> tuple[ModelCatalog, dict[str, int]]:
    """Every architecture of the run (same init seed each), per-sample FLOPs, and assignment."""
    modules = {
        name: build_model(
            name,
            input_shape=data.input_shape,
            num_classes=data.num_classes,
            seed=derive_seed(sc.seed, "init"),
        )
        for name in sc.model.names
    }
    per_sample = {
        name: forward_flops_per_sample(module, data.input_shape) for name, module in modules.items()
    }
    for module in modules.values():
        module.to("meta" if sc.execution.cost_only else device)
    architectures = {name: Architecture.of(name, module) for name, module in modules.items()}
    sizes = {name: arch.num_params() for name, arch in architectures.items()}
    assigned = assign_architectures(sc, num_train, sizes)
    return ModelCatalog(architectures, tuple(assigned), sc.model.names[0]), per_sample


def plan_executor(
    sc: Scenario, ctx: TrainingContext, name: str | None, num_classes: int
) -> tuple[str, Calibration | None]:
    """The executor that runs (``cost_only``, or the requested one with ``auto`` resolved)
    and, for ``auto`` and an uncapped ``batched``, the probe that decided and sized it
    (:mod:`mecsim.executors.calibration`)."""
    if sc.execution.cost_only:
        return "cost_only", None
    requested = name or sc.execution.executor
    if requested not in ("auto", "batched") or (
        requested == "batched" and sc.execution.max_batch_clients is not None
    ):
        return requested, None
    budget = sc.execution.memory_budget_gb
    calibration = calibrate(
        ctx.functions[ctx.models.default_name],
        tuple(ctx.data["train"][0].shape[1:]),
        num_classes,
        int(getattr(sc.algorithm, "batch_size", 16)),
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
        scenario: a TOML path, a mapping, or a :class:`~mecsim.scenario.Scenario`.
        overrides: dotted ``key=value`` strings (or a mapping) applied before validation,
            e.g. ``["protocol.rounds=5", "algorithm.name=ditto"]``.
        out: run directory; default ``<output.dir>/<name>-seed<seed>`` (suffixed if taken).
        device: ``cpu`` (default) or ``cuda`` for the real training.
        executor: client-job backend (``auto``, ``serial``, ``batched``, ``ray``); default
            ``execution.executor``.
        write: write the run directory (False: only return the tables).
        progress: show a progress bar (default: ``output.progress``).
        resume: continue the interrupted run into the same directory from its
            checkpoint (see :mod:`mecsim.checkpoint`); the tables equal an
            uninterrupted run's except the wall-clock columns.

    Returns:
        A :class:`RunResult`: ``events``, ``rounds`` and ``clients`` (pandas
        DataFrames), ``summary`` (as in ``summary.json``), ``run_dir``.

    Raises:
        mecsim.errors.MecsimError: bad input, named by its field, before any work.
    """
    sc = load_scenario(scenario, overrides)
    if resume and not write:
        raise ConfigError("--resume", "resume continues a run directory; it needs write=True")
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
class World:
    """Everything a run builds before its first event: the checks happen while building it."""

    clients: list[ClientProfile]
    network: Network
    data: FederatedData
    num_train: list[int]
    models: ModelCatalog
    ctx: TrainingContext
    evaluator: CurveEvaluator | Evaluator
    public_nbytes: int
    faults: Faults


def build_world(sc: Scenario, torch_device: torch.device) -> World:
    """Build clients, links, data, partition, models and algorithm; every check that can
    refuse a scenario runs here, before any work (``validate`` calls this too)."""
    cost_only = sc.execution.cost_only
    clients = build_clients(sc)
    network = Network(sc.network, clients, sc.seed)  # checks the links
    faults = Faults(sc.faults, len(clients), sc.seed)  # reads and checks the trace
    data = build_data(sc, torch_device)
    num_train = [i.shape[0] for i in data.train]
    models, per_sample = build_models(sc, data, torch_device, num_train)
    model_nbytes = {
        name: payload_nbytes(arch.initial.to_payload())
        for name, arch in models.architectures.items()
    }
    network.check_transfer_times(
        {c.id: model_nbytes[arch] for c, arch in zip(clients, models.client_arch, strict=True)},
        "the model",
    )
    label_counts = None
    if not cost_only:
        label_counts = [
            torch.bincount(data.y_train[i], minlength=data.num_classes) for i in data.train
        ]
    algorithm_class = ALGORITHMS.get(sc.algorithm.name)
    algorithm = algorithm_class(sc.algorithm, models, label_counts, sc.seed)
    labeled = algorithm_class.public_data == "labeled"
    public = (data.x_public, data.y_public if labeled else None)
    ctx = TrainingContext(
        algorithm,
        models,
        {name: ModelFunction(arch.module) for name, arch in models.architectures.items()},
        per_sample,
        {"train": (data.x_train, data.y_train), "public": public},
        sc.seed,
        proximal=sc.protocol.local_proximal,
    )
    if cost_only:
        evaluator: CurveEvaluator | Evaluator = CurveEvaluator(sc.execution.accuracy_curve)
    else:
        trainers = sc.clients.count - sc.evaluation.new_clients  # new clients apart
        evaluator = Evaluator(
            models,
            data.x_test,
            data.y_test,
            data.test[:trainers],
            num_train[:trainers],
            mean=sc.evaluation.personal_mean,
            ddof=sc.evaluation.std_ddof,
            global_size=data.global_test_size,
        )
    uses_public = algorithm_class.public_data != "none"
    public_nbytes = (
        payload_nbytes({"x": public[0]} | ({"y": public[1]} if labeled else {}))
        if uses_public
        else 0
    )
    return World(clients, network, data, num_train, models, ctx, evaluator, public_nbytes, faults)


@dataclass
class Setup:
    """How a run executes, decided before its first event (``summary.json`` reports it)."""

    device: torch.device
    threads: int
    executor: str
    executor_setting: str
    calibration: Calibration | None


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
        executor_used, calibration = plan_executor(sc, world.ctx, executor, world.data.num_classes)
        setup = Setup(
            torch_device, threads, executor_used, executor or sc.execution.executor, calibration
        )
        sim = build_simulation(sc, world, setup, checkpoint)
    simulate(sc, sim, run_dir, progress)
    with paused_gc():
        result = tabulate(sc, world, setup, sim, run_dir)
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
    return Simulation(
        algorithm=world.ctx.algorithm,
        executor=job_executor,
        network=world.network,
        clients=world.clients,
        indices=[world.data.client_indices(c) for c in range(sc.clients.count)],
        server_device=DEVICES.get(sc.server.device),
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


def clients_frame(world: World, sim: Simulation, accuracies: list[float] | float) -> pd.DataFrame:
    """The clients table: each client's radio, device, data, model and final accuracy.

    Built column by column from arrays: a device's and an architecture's values are
    looked up once per kind and spread by index (a million clients in about a second).
    """
    import pandas as pd

    clients, data, models = world.clients, world.data, world.models
    n = len(clients)

    def column(values: Iterable[Any], dtype: Any = float) -> np.ndarray:
        return np.fromiter(values, dtype, n)

    device_of: dict[Any, int] = {}  # device profile -> its index, in first-seen order
    device = column((device_of.setdefault(c.device, len(device_of)) for c in clients), np.int64)
    kinds = list(device_of)
    archs = list(models.architectures)
    arch_of = {a: i for i, a in enumerate(archs)}
    arch = column(map(arch_of.__getitem__, models.client_arch), np.int64)

    def per_device(attribute: str) -> np.ndarray:
        return np.array([getattr(d, attribute) for d in kinds])[device]

    def per_arch(values: dict[str, Any]) -> np.ndarray:
        return np.array([values[a] for a in archs])[arch]

    params = {name: a.num_params() for name, a in models.architectures.items()}
    return pd.DataFrame(
        {
            "client": column((c.id for c in clients), np.int64),
            "distance_m": column(c.distance_m for c in clients),
            "bandwidth_mhz": column(c.bandwidth_hz for c in clients) / 1e6,
            "tx_power_dbm": column(c.tx_power_dbm for c in clients),
            "device": per_device("name").astype(object),
            "device_flops_per_s": per_device("flops_per_s"),
            "device_power_w": per_device("power_w"),
            "rx_power_w": per_device("rx_power_w"),
            "idle_power_w": per_device("idle_power_w"),
            "num_train": np.asarray(world.num_train, dtype=np.int64),
            "num_val": column((v.shape[0] for v in data.val), np.int64),
            "num_test": column((t.shape[0] for t in data.test), np.int64),
            "model": per_arch({a: a for a in archs}).astype(object),
            "num_params": per_arch(params),
            # pytorch-OpCounter's convention (KAPC Table 6): a multiply-accumulate of a conv
            # or linear layer is one op; torch's counter, which mecsim's FLOPs use, counts 2
            "forward_macs_per_sample": per_arch(
                {a: world.ctx.per_sample_flops[a] // 2 for a in archs}
            ),
            "state_peak_bytes": np.asarray(sim.client_state_peak_bytes, dtype=np.int64),
            "final_personal_acc": accuracies,
        }
    )


def tabulate(
    sc: Scenario, world: World, setup: Setup, sim: Simulation, run_dir: Path | None
) -> RunResult:
    """A finished simulation as tables: events, rounds, clients and ``summary.json``."""
    from mecsim.analysis import summarize

    cost_only = sc.execution.cost_only
    events, rounds = sim.recorder.events(), sim.recorder.rounds()
    final = sim.last_evaluation
    newcomers = evaluate_newcomers(sc, world, sim, events)
    accuracies = (
        [*final.client_acc, *newcomers.get("new_client_accs", [])]
        if final and final.client_acc
        else float("nan")
    )
    clients_table = clients_frame(world, sim, accuracies)
    data = world.data
    summary = {
        "name": sc.name,
        "seed": sc.seed,
        "algorithm": sc.algorithm.name,
        "partition_redraws": data.partition_redraws,
        "clients_without_local_test": 0 if cost_only else sum(len(t) == 0 for t in data.test),
        **summarize(events, rounds, clients_table),
        "server_state_peak_bytes": sim.server_state_peak_bytes,
        "accuracy_source": (
            "measured"
            if not cost_only
            else "assumed"
            if sc.execution.accuracy_curve is not None
            else "none"
        ),
        "executor": setup.executor,
        "executor_setting": setup.executor_setting,
        "threads": setup.threads,
        "threads_setting": sc.execution.threads,
        "calibration": None if setup.calibration is None else setup.calibration.as_dict(),
        "executor_report": executor_report(sim.executor),
        "evaluation_probe": getattr(world.evaluator, "probe_result", None),
        **newcomers,
        "device": setup.device.type,
        "protocol": sc.protocol.model_dump(mode="json"),
        "network": sc.network.model_dump(mode="json", exclude_none=True),
    }
    return RunResult(
        sc, events, rounds, clients_table, summary, run_dir, sim.server_state, sim.client_states
    )


def executor_report(executor: Any) -> dict[str, Any] | None:
    """What the executor reports about where jobs ran (the Ray executor: jobs per node)."""
    real = getattr(executor, "real", executor)  # behind the checkpoint's recorder
    report = getattr(real, "report", None)
    return None if report is None else report()


def evaluate_newcomers(
    sc: Scenario, world: World, sim: Simulation, events: pd.DataFrame
) -> dict[str, Any]:
    """Summary entries of the new clients (:mod:`mecsim.newcomers`): their count, what
    joining cost them (bytes received, FLOPs, seconds after the last trained round's
    last event; from the events of round ``protocol.rounds``) and, with training, the mean (as ``evaluation.personal_mean`` weighs it), standard
    deviation and per-client accuracies of their adapted models."""
    k = sc.evaluation.new_clients
    if k == 0:
        return {}
    joined = events[events["round"] == sc.protocol.rounds]
    trained_until = float(events.loc[events["round"] < sc.protocol.rounds, "t_end"].max())
    out: dict[str, Any] = {
        "new_clients": k,
        "new_client_bytes_down": int(joined.loc[joined["role"] == "receiver", "bytes"].sum()),
        "new_client_flops": int(joined["flops"].sum()),
        "new_client_join_s": float(joined["t_end"].max()) - trained_until if len(joined) else 0.0,
    }
    if not isinstance(world.evaluator, Evaluator):  # cost-only: nothing to score
        return out
    first = sc.clients.count - k
    data = world.data
    evaluator = Evaluator(
        world.models,
        data.x_test,
        data.y_test,
        data.test[first:],
        world.num_train[first:],
        mean="clients"
        if sc.evaluation.personal_mean == "selected"
        else sc.evaluation.personal_mean,
        ddof=sc.evaluation.std_ddof,
        global_size=data.global_test_size,
        first_client=first,
    )
    states = newcomer_states(sim.newcomer_models, range(first, sc.clients.count))
    scored = evaluator.evaluate(FixedModels(), sim.server_state, states, sc.protocol.rounds)  # type: ignore[arg-type]
    out.update(
        new_client_acc=scored.personal_acc,
        new_client_acc_std=scored.personal_acc_std,
        new_client_accs=list(scored.client_acc),
    )
    return out


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
        for name in ("events", "rounds", "clients"):
            table: pd.DataFrame = getattr(result, name)
            write_file(tmp / f"{name}.parquet", lambda p, t=table: t.to_parquet(p, index=False))
            if name != "events" or result.scenario.output.events_csv:
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
        if source != "none":  # a cost-only run without a curve has no accuracy to plot
            title = (
                f"{result.scenario.name} ({result.scenario.algorithm.name}, "
                f"{result.scenario.protocol.kind})"
            )
            write_file(
                tmp / "accuracy.png",
                lambda p: plot_accuracy(result.rounds, p, title, assumed=source == "assumed"),
            )
