"""The serial executor: one client after another, FLOPs metered by forward hooks."""

from __future__ import annotations

from mecsim.executors.base import TaskBatch, TaskLoopExecutor, TrainingContext
from mecsim.training import TrainResult, train


def train_serially(ctx: TrainingContext, batch: TaskBatch) -> list[TrainResult]:
    """Train each job of ``batch`` in turn with the shared trainer."""
    algorithm = ctx.algorithm
    schedule = batch.schedule
    term = algorithm.loss_term(batch.task)
    results = []
    for job, start, context, generator in zip(
        batch.jobs, batch.starts, batch.contexts, batch.generators, strict=True
    ):
        with ctx.meter.measure() as meter:
            result = train(
                ctx.model,
                start,
                ctx.x,
                ctx.y,
                job.train_indices,
                schedule,
                generator,
                term,
                context,
            )
        result.flops = meter.flops
        results.append(result)
    return results


class SerialExecutor(TaskLoopExecutor):
    """One job after another in this process (the reference backend)."""

    def train_many(self, batch: TaskBatch) -> list[TrainResult]:
        return train_serially(self.ctx, batch)
