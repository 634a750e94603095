"""The Ray executor: client jobs run in Ray actors, on one machine or a cluster.

The driver keeps the SimPy clock and all decisions; each round's ready jobs
are split into contiguous chunks, one per actor, and each actor runs its
chunk with an inner executor (``batched`` by default). Every actor receives
the shared training context (algorithm, architecture, dataset tensors) once,
when it starts. Since jobs are pure and seeded per (client, round, task),
results equal the serial executor's.

Point mecsim at a cluster with ``execution.ray_address`` (e.g. ``"auto"``
on a cluster node, or ``"ray://head:10001"``); without it a local Ray
instance starts. ``execution.ray_gpus_per_task`` gives each actor a GPU
share; an actor with a GPU trains on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from mecsim.errors import MecsimError
from mecsim.executors.base import ClientJob, JobResult, TrainingContext
from mecsim.state import ModelState


def to_device(obj: Any, device: torch.device | str) -> Any:
    """Move tensors inside dicts, lists, tuples, ModelStates and jobs/results to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, ModelState):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    if isinstance(obj, (ClientJob, JobResult)):
        return dataclasses.replace(
            obj,
            **{f.name: to_device(getattr(obj, f.name), device) for f in dataclasses.fields(obj)},
        )
    return obj


def context_on(ctx: TrainingContext, device: torch.device | str) -> TrainingContext:
    """``ctx`` with its data tensors and architecture templates on ``device``."""
    for function in ctx.functions.values():
        function.model.to(device)
    return dataclasses.replace(ctx, data=to_device(ctx.data, device))


class _Worker:
    """A Ray actor holding the training context on its device."""

    def __init__(self, ctx: TrainingContext, inner: str, max_clients: int | None) -> None:
        from mecsim.executors import make_executor

        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        options = {"max_clients": max_clients} if inner == "batched" else {}
        self.executor = make_executor(inner, context_on(ctx, self.device), **options)

    def run(self, jobs: list[ClientJob]) -> list[JobResult]:
        results = self.executor.run(to_device(jobs, self.device))
        return to_device(results, "cpu")


class RayExecutor:
    """Runs each round's jobs across Ray actors (see the module docstring)."""

    def __init__(
        self,
        ctx: TrainingContext,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        gpus_per_task: float = 0.0,
        tasks: int | None = None,
        inner: str = "batched",
        max_clients: int | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise MecsimError(
                "execution.executor = 'ray' needs Ray: pip install 'mecsim[ray]' (or pip install ray)"
            ) from None
        self.ray = ray
        if not ray.is_initialized():
            ray.init(
                address=address,
                num_cpus=num_cpus if address is None else None,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        count = tasks or max(1, int(ray.available_resources().get("CPU", 1)))
        self.device = ctx.device
        cpu_ctx = context_on(ctx, "cpu")
        actor = ray.remote(num_cpus=1, num_gpus=gpus_per_task)(_Worker)
        self.workers = [actor.remote(cpu_ctx, inner, max_clients) for _ in range(count)]
        context_on(ctx, self.device)

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        if not jobs:
            return []
        n = min(len(self.workers), len(jobs))
        bounds = [round(i * len(jobs) / n) for i in range(n + 1)]
        chunks = [
            to_device(list(jobs[a:b]), "cpu") for a, b in zip(bounds, bounds[1:], strict=False)
        ]
        refs = [w.run.remote(chunk) for w, chunk in zip(self.workers, chunks, strict=False)]
        return [to_device(r, self.device) for part in self.ray.get(refs) for r in part]

    def close(self) -> None:
        """Stop the actors (the Ray instance stays up for reuse)."""
        for worker in self.workers:
            self.ray.kill(worker)
        self.workers = []
