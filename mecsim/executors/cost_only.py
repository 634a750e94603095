"""The cost-only executor: no training, only the work a job *would* do.

Used to study the network and the protocol alone with many clients. Model
state lives on PyTorch's ``meta`` device (shapes and dtypes, no storage), so
payload sizes are exact while 10,000 clients cost almost no memory. A task's
FLOPs are what the serial executor would meter: steps x batch x per-sample
forward FLOPs x 3, plus the algorithm's explicit extra FLOPs.
"""

from __future__ import annotations

from mecsim.cost import training_flops
from mecsim.executors.base import TaskBatch, TaskLoopExecutor, TrainingContext
from mecsim.training import TrainResult


def skip_training(ctx: TrainingContext, batch: TaskBatch) -> list[TrainResult]:
    """Each job keeps its start state; steps and FLOPs follow from the schedule."""
    schedule = batch.schedule
    results = []
    for job, start in zip(batch.jobs, batch.starts, strict=True):
        n = len(job.train_indices)
        steps = schedule.num_steps(n)
        samples = steps * min(schedule.batch_size, n)
        flops = training_flops(samples, ctx.meter.per_sample)
        results.append(TrainResult(start, steps, samples, flops))
    return results


class CostOnlyExecutor(TaskLoopExecutor):
    """Times jobs without running them (see the module docstring)."""

    def train_many(self, batch: TaskBatch) -> list[TrainResult]:
        return skip_training(self.ctx, batch)
