"""Executors run client jobs; the protocol decides *when* they happen.

A job is pure: (client state, received payload, client data, seeded batch
order) -> (new client state, upload payload, metered FLOPs per task). An
executor may therefore run a round's ready jobs in any order or all at once;
the results do not depend on the backend. This module has the serial backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from torch import Tensor, nn

from mecsim.algorithms.base import Algorithm, ClientState
from mecsim.cost import FlopMeter
from mecsim.registry import Registry
from mecsim.rng import torch_generator
from mecsim.state import Payload
from mecsim.training import train


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


def run_job(job: ClientJob, ctx: TrainingContext) -> JobResult:
    """Run every task of ``ctx.algorithm`` for one client, in order."""
    algorithm = ctx.algorithm
    state = dict(job.state)
    result = JobResult(job.client, state, None)
    for task in algorithm.tasks:
        generator = torch_generator(
            ctx.seed, "batches", job.client, job.round, task.name, device=ctx.x.device
        )
        start = algorithm.begin_task(task, state, job.payload)
        with ctx.meter.measure() as meter:
            trained = train(
                ctx.model,
                start,
                ctx.x,
                ctx.y,
                job.train_indices,
                algorithm.schedule(task),
                generator,
                algorithm.loss_term(task),
                algorithm.task_context(task, state, job.payload),
            )
            meter.add(algorithm.extra_flops(task, start, trained.steps))
        algorithm.end_task(task, state, trained.state)
        result.task_flops[task.name] = meter.flops
        result.task_steps[task.name] = trained.steps
        if task.uploads:
            result.upload = algorithm.upload(state)
    return result


class Executor(Protocol):
    """Runs a batch of ready jobs and returns their results in the same order."""

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]: ...


class SerialExecutor:
    """One job after another in this process."""

    def __init__(self, ctx: TrainingContext) -> None:
        self.ctx = ctx

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        return [run_job(job, self.ctx) for job in jobs]


EXECUTORS: Registry[type] = Registry("executor", "executor")
EXECUTORS.add("serial", SerialExecutor, "one client job after another (reference backend)")


def make_executor(name: str, ctx: TrainingContext) -> Executor:
    """Build the executor registered as ``name``."""
    return EXECUTORS.get(name)(ctx)


__all__ = [
    "ClientJob",
    "EXECUTORS",
    "Executor",
    "JobResult",
    "SerialExecutor",
    "TrainingContext",
    "run_job",
    "make_executor",
]
