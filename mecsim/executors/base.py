"""Client jobs and the task loop every executor shares.

A job is pure: (client state, received payload, client data, seeded batch
order) -> (new client state, upload payload, FLOPs per task). An executor may
therefore run a round's ready jobs in any order, all at once, or on other
machines; the results do not depend on the backend. Executors differ only in
how they train a list of (start state, data) pairs for one task: see
:func:`run_tasks`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor, nn

from mecsim.algorithms.base import Algorithm, ClientState, Task
from mecsim.cost import FlopMeter
from mecsim.rng import torch_generator
from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import Schedule, TrainResult


@dataclass
class ClientJob:
    """One client's work for one round."""

    client: int
    round: int
    state: ClientState
    payload: Payload | None
    train_indices: Tensor
    tasks: tuple[str, ...] | None = None
    """Names of the tasks to run (None: all, in the algorithm's order)."""
    steps: dict[str, int] = field(default_factory=dict)
    """Per-task SGD step counts overriding the algorithm's schedule (wait-free windows)."""

    def runs(self, task: Task) -> bool:
        return self.tasks is None or task.name in self.tasks


@dataclass
class JobResult:
    """What a job produced: new state, upload, and FLOPs/steps per task (in task order)."""

    client: int
    state: ClientState
    upload: Payload | None
    task_flops: dict[str, int] = field(default_factory=dict)
    task_steps: dict[str, int] = field(default_factory=dict)


@dataclass
class TrainingContext:
    """What every job of a run shares: algorithm, architecture, data tensors, seed."""

    algorithm: Algorithm
    model: nn.Module
    meter: FlopMeter
    x: Tensor
    y: Tensor
    seed: int


@dataclass(frozen=True)
class TaskBatch:
    """The inputs of one task for several jobs, aligned by position."""

    task: Task
    schedule: Schedule
    jobs: Sequence[ClientJob]
    starts: Sequence[ModelState]
    contexts: Sequence[TensorDict]
    seed: int
    device: torch.device

    def generator(self, position: int) -> torch.Generator:
        """The batch-order stream of job ``position``: (seed, "batches", client, round, task)."""
        job = self.jobs[position]
        return torch_generator(
            self.seed, "batches", job.client, job.round, self.task.name, device=self.device
        )

    @property
    def generators(self) -> list[torch.Generator]:
        return [self.generator(i) for i in range(len(self.jobs))]


TrainMany = Callable[[TaskBatch], list[TrainResult]]
"""Trains every job of a :class:`TaskBatch`; results carry the FLOPs they metered."""


def run_tasks(
    jobs: Sequence[ClientJob], ctx: TrainingContext, train_many: TrainMany
) -> list[JobResult]:
    """Run the algorithm's tasks, in order, for every job; ``train_many`` does the training.

    For each task, the jobs that run it are grouped by their effective
    schedule (a job may override a task's step count) and trained group by group.
    """
    algorithm = ctx.algorithm
    states = [dict(job.state) for job in jobs]
    results = [JobResult(job.client, state, None) for job, state in zip(jobs, states, strict=True)]
    for task in algorithm.tasks:
        default = algorithm.schedule(task)
        groups: dict[Schedule, list[int]] = {}
        for i, job in enumerate(jobs):
            if job.runs(task):
                steps = job.steps.get(task.name)
                schedule = default if steps is None else dataclasses.replace(default, steps=steps)
                groups.setdefault(schedule, []).append(i)
        for schedule, members in groups.items():
            batch = TaskBatch(
                task,
                schedule,
                [jobs[i] for i in members],
                [algorithm.begin_task(task, states[i], jobs[i].payload) for i in members],
                [algorithm.task_context(task, states[i], jobs[i].payload) for i in members],
                ctx.seed,
                ctx.x.device,
            )
            for i, start, outcome in zip(members, batch.starts, train_many(batch), strict=True):
                algorithm.end_task(task, states[i], outcome.state)
                result = results[i]
                result.task_flops[task.name] = outcome.flops + algorithm.extra_flops(
                    task, start, outcome.steps
                )
                result.task_steps[task.name] = outcome.steps
                if task.uploads:
                    result.upload = algorithm.upload(states[i])
    return results


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
