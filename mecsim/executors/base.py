"""Client jobs and the task loop every executor shares.

A job is pure: (client state, received payload, client data, seeded batch
order) -> (new client state, upload payload, FLOPs per task). An executor may
therefore run a round's ready jobs in any order, all at once, or on other
machines; the results do not depend on the backend. Executors differ only in
how they train a :class:`TaskBatch` (the jobs of one task that share an
architecture and a schedule): see :func:`run_tasks`. Server work is a job
too (client :data:`~mecsim.algorithms.base.SERVER`, on the server state).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from mecsim.algorithms.base import (
    Algorithm,
    ClientState,
    RoundContext,
    Task,
    constants_of,
    finish,
    loss_of,
    schedule_of,
    start_of,
)
from mecsim.algorithms.losses import proximal
from mecsim.common.errors import ConfigError
from mecsim.common.rng import torch_generator
from mecsim.learning.cost import StepMeter
from mecsim.learning.models.catalog import ModelCatalog
from mecsim.learning.state import ModelState, Payload, TensorDict, all_finite
from mecsim.learning.training import (
    Loss,
    ModelFunction,
    Schedule,
    SplitData,
    TrainResult,
    infer,
)


@dataclass(slots=True)
class ClientJob:
    """One client's (or the server's) work for one round."""

    client: int
    round: int
    state: ClientState
    payload: Payload | None
    indices: dict[str, Tensor]
    """Per split (``train``, ``val``, ``public``): indices into that split's tensors."""
    tasks: tuple[str, ...] | None = None
    """Names of the tasks to run (None: all of the round's, in order)."""
    steps: dict[str, int] = field(default_factory=dict)
    """Per-task SGD step counts overriding the algorithm's schedule (wait-free windows)."""
    server: bool = False
    """A server job: runs the algorithm's server tasks on the server state."""

    def runs(self, task: Task) -> bool:
        return self.tasks is None or task.name in self.tasks


@dataclass(slots=True)
class JobResult:
    """What a job produced: new state, upload, and FLOPs/steps per task (in task order)."""

    client: int
    state: ClientState
    upload: Payload | None
    task_flops: dict[str, int] = field(default_factory=dict)
    task_steps: dict[str, int] = field(default_factory=dict)
    task_loss: dict[str, float] = field(default_factory=dict)
    """Each trained task's mean training loss."""
    reports: dict[str, float] = field(default_factory=dict)
    """What the client reports with this job's update (its loss, its update's norm),
    filled by the simulation when the job is run, logged for a resume's replay."""


@dataclass
class TrainingContext:
    """What every job of a run shares: algorithm, architectures, data tensors, seed.

    ``data`` maps a split name to its (inputs, labels) tensors; ``val``
    shares the training tensors, and ``public`` labels are None unless the
    algorithm asks for labeled public data.
    """

    algorithm: Algorithm
    models: ModelCatalog
    functions: dict[str, ModelFunction]
    per_sample_flops: dict[str, int]
    data: dict[str, tuple[Tensor, Tensor | None]]
    seed: int
    meter: StepMeter = field(default_factory=StepMeter)
    proximal: float = 0.0
    """rho of the protocol's proximal term on uploading tasks (FedAsync); 0 for none.

    An uploading task then minimizes ``loss + rho/2 ||w - w_received||^2`` over
    the trained parameters the payload holds (``ProtocolSettings.local_proximal``).
    """

    @property
    def device(self) -> torch.device:
        return self.data["train"][0].device

    def arch_name(self, job: ClientJob) -> str:
        return self.models.of(job.client).name

    def _anchored(self, task: Task) -> bool:
        return self.proximal > 0 and task.uploads

    def constants(
        self,
        task: Task,
        state: ClientState,
        start: ModelState,
        payload: Payload | None,
        rctx: RoundContext,
    ) -> TensorDict:
        """The task's constants: the algorithm's, plus the proximal anchor (received weights)."""
        consts = constants_of(self.algorithm, task, state, payload, rctx)
        if self._anchored(task) and payload:
            anchor = {ANCHOR + k: payload[k] for k in start.params if k in payload}
            consts = {**consts, **anchor}
        return consts

    def loss(self, task: Task) -> Loss:
        """The task's loss: the algorithm's, plus the protocol's proximal term if any."""
        base = loss_of(self.algorithm, task)
        if not self._anchored(task):
            return base
        rho = self.proximal

        def anchored_loss(forward, params, batch, consts):
            anchor = {k[len(ANCHOR) :]: v for k, v in consts.items() if k.startswith(ANCHOR)}
            own = {k: v for k, v in consts.items() if not k.startswith(ANCHOR)}
            return base(forward, params, batch, own) + rho / 2 * proximal(params, anchor)

        return anchored_loss


ANCHOR = "protocol-anchor/"
"""Prefix of the proximal anchor's entries among a task's constants."""


def split_tensors(
    data: dict[str, tuple[Tensor, Tensor | None]], split: str
) -> tuple[Tensor, Tensor | None]:
    """The (inputs, labels) tensors a split indexes: ``val`` indexes the training tensors."""
    return data["train" if split == "val" else split]


@dataclass(frozen=True)
class TaskBatch:
    """The inputs of one task for several jobs of one architecture, aligned by position."""

    task: Task
    schedule: Schedule
    arch: str
    jobs: Sequence[ClientJob]
    starts: Sequence[ModelState]
    consts: Sequence[TensorDict]
    seed: int
    data: dict[str, tuple[Tensor, Tensor | None]]

    def generator(self, position: int, split: str | None = None) -> torch.Generator:
        """The batch-order stream of job ``position``: (seed, "batches", client, round, task[, split]).

        Always a CPU generator, so the batch order (hence the result) does not depend on
        the device that trains: CUDA's ``randperm`` draws other permutations from a seed.
        """
        job = self.jobs[position]
        extra = () if split is None or split == self.task.split else (split,)
        return torch_generator(self.seed, "batches", job.client, job.round, self.task.name, *extra)

    def splits(self, position: int) -> dict[str, SplitData]:
        """The splits job ``position`` reads, the task's own first, with their batch streams."""
        job = self.jobs[position]
        out = {}
        for name, size in self.task.batch_sizes(self.schedule).items():
            x, y = split_tensors(self.data, name)
            out[name] = SplitData(x, y, job.indices[name], size, self.generator(position, name))
        return out


TrainMany = Callable[[TaskBatch], list[TrainResult]]
"""Trains every job of a :class:`TaskBatch`; results carry the FLOPs they metered."""


def job_context(job: ClientJob, seed: int) -> RoundContext:
    """The :class:`RoundContext` of a job's hooks."""
    sizes = {k: v.shape[0] for k, v in job.indices.items()}
    return RoundContext(job.round, job.client, sizes, seed, job.payload)


def run_tasks(
    jobs: Sequence[ClientJob], ctx: TrainingContext, train_many: TrainMany
) -> list[JobResult]:
    """Run the round's tasks, in order, for every job; ``train_many`` does the training.

    For each task, the jobs that run it are grouped by architecture and
    effective schedule (a job may override a task's step count) and trained
    group by group; inference tasks run here, the same for every executor.
    """
    algorithm = ctx.algorithm
    states = [dict(job.state) for job in jobs]
    contexts = [job_context(job, ctx.seed) for job in jobs]
    results = [JobResult(job.client, state, None) for job, state in zip(jobs, states, strict=True)]
    task_lists = [
        algorithm.server_tasks(job.round) if job.server else algorithm.round_tasks(job.round)
        for job in jobs
    ]
    order = list(dict.fromkeys(t for tasks in task_lists for t in tasks))
    for task in order:
        default = schedule_of(algorithm, task)
        groups: dict[tuple[str, Schedule], list[int]] = {}
        for i, job in enumerate(jobs):
            if task in task_lists[i] and job.runs(task):
                steps = job.steps.get(task.name)
                schedule = default if steps is None else dataclasses.replace(default, steps=steps)
                groups.setdefault((ctx.arch_name(job), schedule), []).append(i)
        for (arch, schedule), members in groups.items():
            starts = [
                start_of(algorithm, task, states[i], jobs[i].payload, contexts[i]) for i in members
            ]
            computes = task.mode == "compute"  # no model runs: no constants, no loss FLOPs
            consts = [
                {} if computes else ctx.constants(task, states[i], s, jobs[i].payload, contexts[i])
                for i, s in zip(members, starts, strict=True)
            ]
            batch = TaskBatch(
                task, schedule, arch, [jobs[i] for i in members], starts, consts, ctx.seed, ctx.data
            )
            if computes:
                outcomes = [
                    TrainResult(start, 0, 0, algorithm.compute(task, states[i], contexts[i]))
                    for i, start in zip(members, starts, strict=True)
                ]
            elif task.mode == "infer":
                outcomes = infer_many(ctx, batch)
            else:
                outcomes = train_many(batch)
            if task.mode == "train":
                check_finite(task, batch.jobs, outcomes)
            for i, outcome in zip(members, outcomes, strict=True):
                finish(algorithm, task, states[i], outcome, contexts[i])
                result = results[i]
                result.task_flops[task.name] = outcome.flops
                result.task_steps[task.name] = outcome.steps
                result.task_loss[task.name] = outcome.loss
                if task.uploads:
                    result.upload = algorithm.upload(states[i], contexts[i])
                    check_payload(algorithm, "upload", result.upload)
    return results


def check_payload(algorithm: Algorithm, hook: str, payload: object) -> None:
    """Stop with a clear error when a hook returns a payload that is not tensors by name
    (its bytes on the wire are the tensors' ``nbytes``)."""
    if payload is None:
        return
    name = type(algorithm).__name__
    if not isinstance(payload, dict):
        raise ConfigError(
            "algorithm.name",
            f"{name}.{hook}() returned a {type(payload).__name__}: return a dict of tensors "
            "(or None to send nothing)",
        )
    for key, value in payload.items():
        if not isinstance(value, torch.Tensor):
            raise ConfigError(
                "algorithm.name",
                f"{name}.{hook}() returned a {type(value).__name__} as {key!r}: every value "
                "of a payload is a tensor (wrap numbers with torch.tensor)",
            )


def check_finite(task: Task, jobs: Sequence[ClientJob], outcomes: Sequence[TrainResult]) -> None:
    """Stop the run with a clear error when training made a model's weights non-finite."""
    weights = (t for outcome in outcomes for t in outcome.state.params.values())
    if all_finite(weights, through_bases=True):
        return  # the usual case: one check of every job's weights (batched: their stacks)
    for job, outcome in zip(jobs, outcomes, strict=True):
        if not all_finite(outcome.state.params.values()):
            who = "the server" if job.server else f"client {job.client}"
            raise ConfigError(
                "algorithm.lr",
                f"training diverged in round {job.round}, {who}, task {task.name!r}: the weights "
                "became NaN or infinite; lower the learning rate (algorithm.lr or the task's own)",
            )


def infer_many(ctx: TrainingContext, batch: TaskBatch) -> list[TrainResult]:
    """Run an inference task: every job's model on its whole split, forward FLOPs only."""
    function = ctx.functions[batch.arch]
    results = []
    for position, start in enumerate(batch.starts):
        split = batch.splits(position)[batch.task.split]
        outputs = infer(function, start, split.x[split.indices].to(start.device))
        if split.y is not None:  # the labels of the split, in the same order as the outputs
            outputs["labels"] = split.y[split.indices].to(start.device)
        n = len(split.indices)
        results.append(TrainResult(start, 0, n, n * ctx.per_sample_flops[batch.arch], outputs))
    return results


def step_flops(
    ctx: TrainingContext,
    client: int,
    task: Task,
    schedule: Schedule,
    start: ModelState,
    consts: TensorDict,
    indices: dict[str, Tensor],
) -> int:
    """FLOPs of one training step of ``task`` for ``client`` (see :class:`StepMeter`)."""
    arch = ctx.models.of(client).name
    shapes = {}
    for name, size in task.batch_sizes(schedule).items():
        x = split_tensors(ctx.data, name)[0]
        shapes[name] = (min(size, len(indices[name])), *x.shape[1:])
    return ctx.meter.step_flops(
        (arch, task),
        ctx.functions[arch],
        ctx.loss(task),
        start,
        consts,
        shapes,
        schedule.trainable,
        schedule.max_grad_norm,
    )


def metered_training_flops(
    ctx: TrainingContext, batch: TaskBatch, position: int, steps: int
) -> int:
    """FLOPs of ``steps`` training steps of job ``position`` of ``batch``."""
    job = batch.jobs[position]
    start, consts = batch.starts[position], batch.consts[position]
    return steps * step_flops(
        ctx, job.client, batch.task, batch.schedule, start, consts, job.indices
    )


class Executor(Protocol):
    """Runs a batch of ready jobs and returns their results in the same order."""

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]: ...


class TaskLoopExecutor:
    """An executor that runs jobs through :func:`run_tasks`.

    Subclasses implement :meth:`train_many`, how one task of many jobs trains.
    """

    def __init__(self, ctx: TrainingContext) -> None:
        self.ctx = ctx

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        return run_tasks(jobs, self.ctx, self.train_many)

    def train_many(self, batch: TaskBatch) -> list[TrainResult]:
        raise NotImplementedError(self)
