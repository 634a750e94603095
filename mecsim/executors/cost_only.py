"""The cost-only executor: no training, only the work a job *would* do.

Used to study the network and the protocol alone with many clients. Model
state lives on PyTorch's ``meta`` device (shapes and dtypes, no storage), so
payload sizes are exact while 10,000 clients cost almost no memory. A task's
FLOPs are what the serial executor would meter for the same steps.

Job classes: when the algorithm declares ``client_blind_costs``, jobs whose
inputs are alike (same architecture, tasks, step overrides, split sizes, and
state and payload of the same shapes; see :func:`job_class`) have the same
results but for the client id. The executor then runs one job per class and
gives every other member a result sharing the representative's state, upload
and counts: a round of a million clients with 181 distinct sample counts runs
181 jobs. ``mecsim check`` compares such a run with one that runs every job.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from torch import Tensor

from mecsim.executors.base import (
    ClientJob,
    JobResult,
    TaskBatch,
    TaskLoopExecutor,
    TrainingContext,
    metered_training_flops,
)
from mecsim.learning.state import ModelState
from mecsim.learning.training import TrainResult


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


class Shapes:
    """Shape fingerprints of states and payloads, memoized by object identity (for
    the duration of one executor call, while every object it saw is alive)."""

    def __init__(self) -> None:
        self.memo: dict[int, Hashable] = {}

    def of(self, value: object) -> Hashable:
        """What of ``value`` a cost-only job can see: shapes and dtypes of meta tensors,
        plain values as they are; anything else (a tensor with values, an object) by
        identity, so only the very same object matches it."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if type(value) is dict and not value:  # a fresh client's state: not memoized
            return EMPTY
        key = id(value)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._fingerprint(value)
        return found

    def _fingerprint(self, value: object) -> Hashable:
        if isinstance(value, Tensor):
            return ("tensor", value.shape, value.dtype) if value.is_meta else ("id", id(value))
        if isinstance(value, ModelState):
            return ("model", self.of(value.params), self.of(value.buffers))
        if isinstance(value, dict):
            return ("dict", tuple((k, self.of(v)) for k, v in value.items()))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(self.of(v) for v in value))
        return ("id", id(value))


EMPTY = ("dict", ())


def job_class(ctx: TrainingContext, job: ClientJob, shapes: Shapes) -> Hashable:
    """The inputs of ``job`` its cost-only result depends on (for a client-blind algorithm).

    Splits by the identity of their index tensors: cost-only clients with equal sample
    counts share one (shape-only) tensor, and distinct tensors only split classes."""
    return (
        job.server,
        job.round,
        job.tasks,
        tuple(job.steps.items()) if job.steps else (),
        ctx.models.client_arch[job.client] if job.client >= 0 else None,
        tuple(map(id, job.indices.values())),
        shapes.of(job.state),
        shapes.of(job.payload),
    )


class CostOnlyExecutor(TaskLoopExecutor):
    """Times jobs without running them (see the module docstring)."""

    def __init__(self, ctx: TrainingContext, classes: bool = True) -> None:
        super().__init__(ctx)
        self.classes = classes and ctx.algorithm.client_blind_costs

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        if not self.classes or len(jobs) < 2:
            return super().run(jobs)
        shapes = Shapes()
        members: dict[Hashable, list[int]] = {}
        for i, job in enumerate(jobs):
            members.setdefault(job_class(self.ctx, job, shapes), []).append(i)
        if len(members) == len(jobs):
            return super().run(jobs)
        groups = list(members.values())
        done = super().run([jobs[group[0]] for group in groups])
        results: list[JobResult | None] = [None] * len(jobs)
        for group, first in zip(groups, done, strict=True):
            results[group[0]] = first
            for i in group[1:]:
                results[i] = JobResult(
                    jobs[i].client, first.state, first.upload, first.task_flops, first.task_steps
                )
        return results  # type: ignore[return-value]

    def train_many(self, batch: TaskBatch) -> list[TrainResult]:
        return skip_training(self.ctx, batch)
