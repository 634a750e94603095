"""The cost-only executor: no training, only the work a job *would* do.

Used to study the network and the protocol alone with many clients. Model
state lives on PyTorch's ``meta`` device (shapes and dtypes, no storage), so
payload sizes are exact while 10,000 clients cost almost no memory. A task's
FLOPs are what the serial executor would meter: steps x batch x per-sample
forward FLOPs x 3, plus the algorithm's explicit extra FLOPs.
"""

from __future__ import annotations

from collections.abc import Sequence

from mecsim.cost import BACKWARD_FACTOR
from mecsim.executors.base import ClientJob, JobResult, TaskBatch, TrainingContext, run_tasks
from mecsim.training import TrainResult


def skip_training(ctx: TrainingContext, batch: TaskBatch) -> list[TrainResult]:
    """Each job keeps its start state; steps and FLOPs follow from the schedule."""
    schedule = batch.schedule
    results = []
    for job, start in zip(batch.jobs, batch.starts, strict=True):
        n = len(job.train_indices)
        steps = schedule.num_steps(n)
        samples = steps * min(schedule.batch_size, n)
        flops = samples * ctx.meter.per_sample * BACKWARD_FACTOR
        results.append(TrainResult(start, steps, samples, flops))
    return results


class CostOnlyExecutor:
    """Times jobs without running them (see the module docstring)."""

    def __init__(self, ctx: TrainingContext) -> None:
        self.ctx = ctx

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        return run_tasks(jobs, self.ctx, lambda batch: skip_training(self.ctx, batch))
