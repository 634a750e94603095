"""The cost-only executor: no training, only the work a job *would* do.

Used to study the network and the protocol alone with many clients. Model
state lives on PyTorch's ``meta`` device (shapes and dtypes, no storage), so
payload sizes are exact while 10,000 clients cost almost no memory. A task's
FLOPs are what the serial executor would meter for the same steps.
"""

from __future__ import annotations

from mecsim.executors.base import (
    TaskBatch,
    TaskLoopExecutor,
    TrainingContext,
    metered_training_flops,
)
from mecsim.training import TrainResult


def skip_training(ctx: TrainingContext, batch: TaskBatch) -> list[TrainResult]:
    """Each job keeps its start state; steps and FLOPs follow from the schedule."""
    schedule = batch.schedule
    sizes = batch.task.batch_sizes(schedule).items()
    # One step's FLOPs by what varies between the jobs of one batch (the architecture,
    # task and schedule are the batch's): a memo for this call only, in front of the
    # StepMeter's cache, whose full key costs 2.5 us more per job (0.25 s at 100,000).
    per_step: dict[tuple, int] = {}
    results = []
    for position, (job, start) in enumerate(zip(batch.jobs, batch.starts, strict=True)):
        n = job.indices[batch.task.split].shape[0]
        steps = schedule.num_steps(n)
        samples = steps * min(schedule.batch_size, n)
        consts = batch.consts[position]
        key = (
            tuple(min(size, job.indices[name].shape[0]) for name, size in sizes),
            tuple((k, v.shape) for k, v in consts.items()),
        )
        if key not in per_step:
            per_step[key] = metered_training_flops(ctx, batch, position, 1)
        results.append(TrainResult(start, steps, samples, steps * per_step[key]))
    return results


class CostOnlyExecutor(TaskLoopExecutor):
    """Times jobs without running them (see the module docstring)."""

    def train_many(self, batch: TaskBatch) -> list[TrainResult]:
        return skip_training(self.ctx, batch)
