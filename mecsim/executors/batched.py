"""The batched executor: many clients' local training as one vmapped computation.

Jobs of one task that share an architecture and an effective batch size
``b = min(batch_size, n_i)`` are stacked: parameters, buffers (BatchNorm
running statistics included), momentum and loss constants gain a leading
client dimension, and every SGD step is one vmapped loss over the group,
differentiated by plain autograd: clients are independent, so the gradient
of the summed client losses with respect to the stacked parameters is every
client's own gradient. (This beats ``vmap(grad(loss))`` by about 1.4x per
step on a CPU, and does not import ``torch._dynamo``, which ``torch.func.grad``
pulls in at its first call: 0.8 s of start-up.)

Each client keeps its own seeded batch order (gathered from the on-device
dataset tensors) and its own step count: clients are stacked longest
first, and a client that has done its steps leaves the stack, so no step
computes a finished client and none is padded into extra steps. Because
the serial trainer draws batches the same way (every batch has exactly
``b`` samples), results equal the serial executor's within float tolerance.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from itertools import accumulate

import torch
from torch import Tensor

from mecsim.executors.base import (
    TaskBatch,
    TaskLoopExecutor,
    TrainingContext,
    metered_training_flops,
)
from mecsim.executors.lockstep import Lockstep
from mecsim.learning.state import ModelState, TensorDict, stack
from mecsim.learning.training import (
    Loss,
    ModelFunction,
    Schedule,
    SplitData,
    TrainResult,
    batch_order,
)


def train_batched(
    function: ModelFunction,
    starts: Sequence[ModelState],
    splits: Sequence[dict[str, SplitData]],
    schedule: Schedule,
    loss: Loss,
    consts: Sequence[TensorDict] | None = None,
    cuda_graphs: bool = True,
) -> list[TrainResult]:
    """Train several clients of one architecture in lockstep; same results as ``train``.

    All clients must have the same effective batch size per split. Clients
    are stacked longest first, so the ones still training are always a
    prefix of the stack: when a client has done its steps its state is set
    aside and the stack shrinks, and no step computes a finished client.
    ``cuda_graphs``: on a GPU, replay each segment's step as a CUDA graph
    (:mod:`mecsim.executors.lockstep`).
    """
    primary = next(iter(splits[0]))
    steps_of = [schedule.num_steps(len(s[primary].indices)) for s in splits]
    rank = sorted(range(len(starts)), key=lambda i: -steps_of[i])  # longest first (stable)
    steps = [steps_of[i] for i in rank]  # non-increasing
    total = steps[0]
    batches = _lockstep_batches([splits[i] for i in rank], steps)
    size = batches[primary].shape[2]
    params = stack([starts[i].params for i in rank])
    names = [n for n in params if schedule.trainable is None or n in schedule.trainable]
    learn = {n: params[n] for n in names}
    frozen = {n: v for n, v in params.items() if n not in learn}
    buffers = stack([starts[i].buffers for i in rank])
    constants = stack([consts[i] for i in rank]) if consts and consts[0] else {}
    state = (learn, frozen, buffers, constants)
    lockstep = Lockstep(function, splits[0], schedule, loss, state, len(rank))
    finished: list[ModelState] = []  # in stack order, filled from the end
    function.model.train()
    t = 0
    while t < total:
        still = sum(1 for n in steps if n > t)
        if still < lockstep.active:  # clients [still, active) are done: set their state aside
            finished.extend(_set_aside(lockstep, still, lockstep.active, params))
            lockstep.shrink(still)
        end = steps[still - 1]  # the next departure: every shape stays until then
        lockstep.segment(batches, t, end, cuda_graphs)
        t = end
    finished.extend(_set_aside(lockstep, 0, lockstep.active, params))
    finished.reverse()
    results: list[TrainResult | None] = [None] * len(rank)
    sums = lockstep.loss_sums
    summed = [0.0] * len(rank) if sums is None else sums.tolist()
    mean_loss = [total / max(n, 1) for total, n in zip(summed, steps, strict=True)]
    for position, client in enumerate(rank):
        results[client] = TrainResult(
            finished[position],
            steps[position],
            steps[position] * size,
            loss=mean_loss[position] if steps[position] else math.nan,
        )
    return results  # type: ignore[return-value]


def _lockstep_batches(splits: Sequence[dict[str, SplitData]], steps: Sequence[int]) -> TensorDict:
    """Per split, the clients' batches as [total, k, b] dataset indices, in a number of
    kernels that does not grow with k: each client's batch positions are drawn on its
    (CPU) generator as the serial trainer draws them, stacked on the CPU, moved in one
    copy and looked up in one gather from the clients' concatenated indices. A client's
    last batch repeats past its end (those rows are never read); every client must have
    the same b per split."""
    total = steps[0]
    batches = {}
    for name in splits[0]:
        members = [s[name] for s in splits]
        sizes = {min(m.batch_size, len(m.indices)) for m in members}
        if len(sizes) != 1:
            raise ValueError(f"train_batched needs one batch size per group, got {sorted(sizes)}")
        size = sizes.pop()
        positions = torch.stack(
            [
                _padded(batch_order(len(m.indices), n, size, m.generator), total)
                for m, n in zip(members, steps, strict=True)
            ],
            dim=1,
        )
        starts = torch.tensor([0, *accumulate(len(m.indices) for m in members)][:-1])
        flat = torch.cat([m.indices for m in members])
        positions = positions.to(flat.device) + starts.to(flat.device).view(1, -1, 1)
        batches[name] = flat[positions]
    return batches


def _padded(order: Tensor, total: int) -> Tensor:
    """``order`` ([steps, b]) with its last row repeated up to ``total`` rows."""
    if len(order) == total:
        return order
    if len(order) == 0:
        return order.new_zeros(total, order.shape[1])
    return torch.cat([order, order[-1:].expand(total - len(order), -1)])


def _set_aside(lockstep: Lockstep, start: int, stop: int, params: TensorDict) -> list[ModelState]:
    """The states of the clients at positions ``stop - 1`` down to ``start`` of the stack
    (parameters in the order of ``params``), as views: one ``unbind`` per tensor, not
    one indexing per client."""
    learn, frozen, buffers = lockstep.learn, lockstep.frozen, lockstep.buffers
    each = {
        n: (learn[n] if n in learn else frozen[n]).detach()[start:stop].unbind() for n in params
    }
    each_buffer = {n: b[start:stop].unbind() for n, b in buffers.items()}
    return [
        ModelState(
            {n: views[i] for n, views in each.items()},
            {n: views[i] for n, views in each_buffer.items()},
        )
        for i in reversed(range(stop - start))
    ]


def train_grouped(
    ctx: TrainingContext, batch: TaskBatch, max_clients: int | None = None
) -> list[TrainResult]:
    """Group a task's jobs by effective batch sizes and train each group batched.

    ``max_clients`` caps a group's size (larger groups are split) to bound memory.
    """
    splits = [batch.splits(i) for i in range(len(batch.jobs))]
    by_size: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for position, job_splits in enumerate(splits):
        key = tuple(min(s.batch_size, len(s.indices)) for s in job_splits.values())
        by_size[key].append(position)
    cap = max_clients or len(batch.jobs)
    groups = [m[i : i + cap] for m in by_size.values() for i in range(0, len(m), cap)]
    loss = ctx.loss(batch.task)
    results: list[TrainResult | None] = [None] * len(batch.jobs)
    for members in groups:
        trained = train_batched(
            ctx.functions[batch.arch],
            [batch.starts[i] for i in members],
            [splits[i] for i in members],
            batch.schedule,
            loss,
            [batch.consts[i] for i in members],
        )
        for i, result in zip(members, trained, strict=True):
            result.flops = metered_training_flops(ctx, batch, i, result.steps)
            results[i] = result
    return results  # type: ignore[return-value]


class BatchedExecutor(TaskLoopExecutor):
    """Runs a round's jobs as vmapped groups (see the module docstring)."""

    def __init__(self, ctx: TrainingContext, max_clients: int | None = None) -> None:
        super().__init__(ctx)
        self.max_clients = max_clients

    def train_many(self, batch: TaskBatch) -> list[TrainResult]:
        return train_grouped(self.ctx, batch, self.max_clients)
