"""Client jobs and the task loop every executor shares.

A job is pure: (client state, received payload, client data, seeded batch
order) -> (new client state, upload payload, FLOPs per task). An executor may
therefore run a round's ready jobs in any order, all at once, or on other
machines; the results do not depend on the backend. Executors differ only in
how they train a list of (start state, data) pairs for one task: see
:func:`run_tasks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor, nn

from mecsim.algorithms.base import Algorithm, ClientState, Task
from mecsim.cost import FlopMeter
from mecsim.rng import torch_generator
from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import TrainResult


@dataclass
class ClientJob:
    """One client's work for one round."""

    client: int
    round: int
    state: ClientState
    payload: Payload | None
    train_indices: Tensor


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
    """Run the algorithm's tasks, in order, for every job; ``train_many`` does the training."""
    algorithm = ctx.algorithm
    states = [dict(job.state) for job in jobs]
    results = [JobResult(job.client, state, None) for job, state in zip(jobs, states, strict=True)]
    for task in algorithm.tasks:
        batch = TaskBatch(
            task,
            jobs,
            [algorithm.begin_task(task, s, j.payload) for j, s in zip(jobs, states, strict=True)],
            [algorithm.task_context(task, s, j.payload) for j, s in zip(jobs, states, strict=True)],
            ctx.seed,
            ctx.x.device,
        )
        trained = train_many(batch) if jobs else []
        for result, state, start, outcome in zip(
            results, states, batch.starts, trained, strict=True
        ):
            algorithm.end_task(task, state, outcome.state)
            extra = algorithm.extra_flops(task, start, outcome.steps)
            result.task_flops[task.name] = outcome.flops + extra
            result.task_steps[task.name] = outcome.steps
            if task.uploads:
                result.upload = algorithm.upload(state)
    return results


class Executor(Protocol):
    """Runs a batch of ready jobs and returns their results in the same order."""

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]: ...
