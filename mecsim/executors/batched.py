"""The batched executor: many clients' local training as one vmapped computation.

Jobs of one task that share an architecture and an effective batch size
``b = min(batch_size, n_i)`` are stacked: parameters, buffers (BatchNorm
running statistics included), momentum and loss contexts gain a leading
client dimension, and every SGD step is one ``vmap(grad(loss))`` call over
the group. Each client keeps its own seeded batch order (gathered from the
on-device dataset tensors) and its own step count: a client that has done
its steps is masked (its state stops changing), never padded into extra
steps. Because the serial trainer draws batches the same way (every batch
has exactly ``b`` samples), results equal the serial executor's within
float tolerance.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.func import grad, vmap

from mecsim.cost import training_flops
from mecsim.executors.base import TaskBatch, TaskLoopExecutor, TrainingContext
from mecsim.state import ModelState, TensorDict
from mecsim.training import (
    LossTerm,
    Schedule,
    TrainResult,
    batch_order,
    classification_loss,
    sgd_update,
)


def _stack(dicts: Sequence[TensorDict]) -> TensorDict:
    return {k: torch.stack([d[k] for d in dicts]) for k in dicts[0]} if dicts else {}


def _select(mask: Tensor, new: TensorDict, old: TensorDict) -> TensorDict:
    """Per client: ``new`` where ``mask`` is True, else ``old``."""
    out = {}
    for k, v in new.items():
        m = mask.view(-1, *([1] * (v.dim() - 1)))
        out[k] = torch.where(m, v, old[k]) if k in old else v
    return out


def train_batched(
    model: nn.Module,
    starts: Sequence[ModelState],
    x: Tensor,
    y: Tensor,
    indices: Sequence[Tensor],
    schedule: Schedule,
    generators: Sequence[torch.Generator],
    term: LossTerm | None = None,
    contexts: Sequence[TensorDict] | None = None,
) -> list[TrainResult]:
    """Train several clients of one architecture in lockstep; same results as ``train``.

    All clients must have the same effective batch size ``min(batch_size, n_i)``.
    """
    k = len(starts)
    orders = [batch_order(len(i), schedule, g) for i, g in zip(indices, generators, strict=True)]
    sizes = {o.shape[1] for o in orders}
    if len(sizes) != 1:
        raise ValueError(f"train_batched needs one batch size per group, got {sorted(sizes)}")
    steps = torch.tensor([len(o) for o in orders], device=x.device)
    total = int(steps.max())
    # [total, k, b] sample indices; a finished client repeats its last batch (masked out)
    batches = torch.stack(
        [
            idx[torch.cat([o, o[-1:].expand(total - len(o), -1)])] if len(o) < total else idx[o]
            for idx, o in zip(indices, orders, strict=True)
        ],
        dim=1,
    )
    trainable = schedule.trainable
    params = _stack([s.params for s in starts])
    names = [n for n in params if trainable is None or n in trainable]
    learn = {n: params[n] for n in names}
    frozen = {n: v for n, v in params.items() if n not in learn}
    buffers = _stack([s.buffers for s in starts])
    context = _stack(list(contexts)) if contexts and contexts[0] else {}

    def loss(
        learn: TensorDict,
        frozen: TensorDict,
        buffers: TensorDict,
        xb: Tensor,
        yb: Tensor,
        ctx: TensorDict,
    ):
        buffers = {n: b.clone() for n, b in buffers.items()}  # BN updates these in place
        value = classification_loss(model, {**frozen, **learn}, buffers, xb, yb, ctx, term)
        return value, buffers

    step = vmap(grad(loss, has_aux=True))
    momentum: TensorDict = {}
    model.train()
    for t in range(total):
        batch = batches[t]
        grads, new_buffers = step(learn, frozen, buffers, x[batch], y[batch], context)
        new_learn, new_momentum = sgd_update(learn, grads, momentum, schedule)
        if t < int(steps.min()):
            learn, buffers, momentum = new_learn, new_buffers, new_momentum
        else:
            active = t < steps
            learn = _select(active, new_learn, learn)
            buffers = _select(active, new_buffers, buffers)
            momentum = _select(active, new_momentum, momentum)
    size = next(iter(sizes))
    return [
        TrainResult(
            ModelState(
                {n: (learn[n][i] if n in learn else frozen[n][i]) for n in params},
                {n: b[i] for n, b in buffers.items()},
            ),
            int(steps[i]),
            int(steps[i]) * size,
        )
        for i in range(k)
    ]


def train_grouped(
    ctx: TrainingContext, batch: TaskBatch, max_clients: int | None = None
) -> list[TrainResult]:
    """Group a task's jobs by effective batch size and train each group batched.

    ``max_clients`` caps a group's size (larger groups are split) to bound memory.
    """
    algorithm = ctx.algorithm
    schedule = batch.schedule
    by_size: dict[int, list[int]] = defaultdict(list)
    for position, job in enumerate(batch.jobs):
        by_size[min(schedule.batch_size, len(job.train_indices))].append(position)
    cap = max_clients or len(batch.jobs)
    groups = [m[i : i + cap] for m in by_size.values() for i in range(0, len(m), cap)]
    results: list[TrainResult | None] = [None] * len(batch.jobs)
    for members in groups:
        trained = train_batched(
            ctx.model,
            [batch.starts[i] for i in members],
            ctx.x,
            ctx.y,
            [batch.jobs[i].train_indices for i in members],
            schedule,
            [batch.generator(i) for i in members],
            algorithm.loss_term(batch.task),
            [batch.contexts[i] for i in members],
        )
        for i, result in zip(members, trained, strict=True):
            # the same count the serial executor's forward hook meters
            result.flops = training_flops(result.samples, ctx.meter.per_sample)
            results[i] = result
    return results  # type: ignore[return-value]


class BatchedExecutor(TaskLoopExecutor):
    """Runs a round's jobs as vmapped groups (see the module docstring)."""

    def __init__(self, ctx: TrainingContext, max_clients: int | None = None) -> None:
        super().__init__(ctx)
        self.max_clients = max_clients

    def train_many(self, batch: TaskBatch) -> list[TrainResult]:
        return train_grouped(self.ctx, batch, self.max_clients)
