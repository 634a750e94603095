"""The serial executor: one client after another with the shared trainer (the reference)."""

from __future__ import annotations

from mecsim.executors.base import (
    TaskBatch,
    TaskLoopExecutor,
    TrainingContext,
    metered_training_flops,
)
from mecsim.learning.training import TrainResult, train


def train_serially(ctx: TrainingContext, batch: TaskBatch) -> list[TrainResult]:
    """Train each job of ``batch`` in turn with the shared trainer."""
    function = ctx.functions[batch.arch]
    loss = ctx.loss(batch.task)
    results = []
    for position, (start, consts) in enumerate(zip(batch.starts, batch.consts, strict=True)):
        result = train(function, start, batch.splits(position), batch.schedule, loss, consts)
        result.flops = metered_training_flops(ctx, batch, position, result.steps)
        results.append(result)
    return results


class SerialExecutor(TaskLoopExecutor):
    """One job after another in this process (the reference backend)."""

    def train_many(self, batch: TaskBatch) -> list[TrainResult]:
        return train_serially(self.ctx, batch)
