"""Executors: where client jobs run (serial, batched under vmap, Ray, cost-only), all
through ``run_tasks``.

May import algorithms, learning and common; nothing of the network or the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mecsim.common.registry import Registry
from mecsim.executors.base import ClientJob, Executor, JobResult, TrainingContext, run_tasks
from mecsim.executors.batched import BatchedExecutor, train_batched
from mecsim.executors.serial import SerialExecutor

EXECUTORS: Registry[Callable[..., Executor]] = Registry("executor", "execution.executor")
EXECUTORS.add("serial", SerialExecutor, "one client job after another (reference backend)")
EXECUTORS.add("batched", BatchedExecutor, "a round's client jobs stacked and vmapped (torch.func)")


@EXECUTORS.register("ray", "client jobs in Ray actors on a local instance or a cluster")
def _ray_executor(ctx: TrainingContext, **options: Any) -> Executor:
    from mecsim.executors.ray_backend import RayExecutor  # imports ray only when asked for

    return RayExecutor(ctx, **options)


def make_executor(name: str, ctx: TrainingContext, **options: Any) -> Executor:
    """Build the executor registered as ``name`` with backend ``options``."""
    return EXECUTORS.get(name)(ctx, **options)


__all__ = [
    "EXECUTORS",
    "BatchedExecutor",
    "ClientJob",
    "Executor",
    "JobResult",
    "SerialExecutor",
    "TrainingContext",
    "make_executor",
    "run_tasks",
    "train_batched",
]
