"""The shared local trainer: SGD on a loss written as a pure function of parameters.

Algorithms never write an SGD loop. They supply a loss *term*
``term(params, context) -> scalar`` (FedProx's proximal term, Ditto's
``||w - w_G||^2``, a distillation loss, ...) that is added to the
cross-entropy of the model evaluated with ``torch.func.functional_call``.
Because the loss is a pure function of ``(params, buffers, batch, context)``,
the same code runs one client at a time (here) or vmapped over stacked
client states (a batched executor).

Batch order is drawn from a per-(client, round, task) ``torch.Generator``,
so a client's training is reproducible and independent of other clients.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from mecsim.state import ModelState, TensorDict

LossTerm = Callable[[TensorDict, TensorDict], Tensor]
"""An algorithm's extra loss: ``term(params, context) -> scalar tensor``."""


@dataclass(frozen=True)
class Schedule:
    """How long and how a task trains.

    Args:
        epochs: passes over the client's training data (used when ``steps`` is None).
        steps: exact number of SGD steps; overrides ``epochs``.
        batch_size: samples per step (the last batch of an epoch may be smaller).
        lr, momentum, weight_decay: SGD settings (torch.optim.SGD semantics, dampening 0).
        trainable: names of the parameters this task updates; None means all.
    """

    epochs: int = 1
    steps: int | None = None
    batch_size: int = 16
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    trainable: frozenset[str] | None = None

    def num_steps(self, num_samples: int) -> int:
        """SGD steps this schedule takes on ``num_samples`` samples."""
        if self.steps is not None:
            return self.steps
        return self.epochs * math.ceil(num_samples / self.batch_size)


@dataclass
class TrainResult:
    """A trained state and the work done: steps, samples forwarded with gradients, FLOPs.

    ``flops`` is filled in by the executor that metered the work.
    """

    state: ModelState
    steps: int
    samples: int
    flops: int = 0


def batch_order(num_samples: int, schedule: Schedule, generator: torch.Generator) -> Tensor:
    """Positions (into the client's index tensor) of each step's batch, shape [steps, b].

    Batches are consecutive chunks of a stream of fresh permutations (one per
    pass over the data), so every step sees exactly ``b = min(batch_size,
    num_samples)`` samples and an epoch's tail continues into the next pass.
    Equal batch sizes let a batched executor step many clients in lockstep
    with results identical to one client at a time.
    """
    steps = schedule.num_steps(num_samples)
    size = min(schedule.batch_size, num_samples)
    passes = math.ceil(steps * size / num_samples)
    stream = torch.cat(
        [
            torch.randperm(num_samples, generator=generator, device=generator.device)
            for _ in range(passes)
        ]
    )
    return stream[: steps * size].view(steps, size)


def classification_loss(
    model: nn.Module,
    params: TensorDict,
    buffers: TensorDict,
    x: Tensor,
    y: Tensor,
    context: TensorDict,
    term: LossTerm | None,
) -> Tensor:
    """Cross-entropy of ``model`` with ``params``/``buffers`` on (x, y), plus ``term``.

    A ``logit_bias`` entry in ``context`` is added to the logits before the
    cross-entropy (logit adjustment, e.g. FedRoD's balanced softmax).
    """
    logits = functional_call(model, (params, buffers), (x,))
    if "logit_bias" in context:
        logits = logits + context["logit_bias"]
    loss = F.cross_entropy(logits, y)
    if term is not None:
        loss = loss + term(params, context)
    return loss


def sgd_update(
    params: TensorDict, grads: TensorDict, momentum_buffers: TensorDict, schedule: Schedule
) -> tuple[TensorDict, TensorDict]:
    """One SGD step (out of place) on the parameters that have gradients."""
    new_params = dict(params)
    new_buffers = dict(momentum_buffers)
    for name, grad in grads.items():
        p = params[name]
        if schedule.weight_decay:
            grad = grad + schedule.weight_decay * p
        if schedule.momentum:
            previous = momentum_buffers.get(name)
            grad = grad if previous is None else schedule.momentum * previous + grad
            new_buffers[name] = grad
        new_params[name] = p - schedule.lr * grad
    return new_params, new_buffers


def train(
    model: nn.Module,
    state: ModelState,
    x: Tensor,
    y: Tensor,
    indices: Tensor,
    schedule: Schedule,
    generator: torch.Generator,
    term: LossTerm | None = None,
    context: TensorDict | None = None,
) -> TrainResult:
    """Train ``state`` on samples ``x[indices]``, ``y[indices]``; return the new state.

    ``model`` is only an architecture template: its own tensors are never read
    or written. BatchNorm running statistics update in the returned buffers.
    """
    context = context or {}
    trainable = schedule.trainable
    params = {k: v.detach() for k, v in state.params.items()}
    buffers = {k: v.clone() for k, v in state.buffers.items()}
    momentum: TensorDict = {}
    samples = 0
    batches = batch_order(len(indices), schedule, generator)
    model.train()
    for positions in batches:
        batch = indices[positions]
        names = [k for k in params if trainable is None or k in trainable]
        leaves = {k: params[k].requires_grad_(True) for k in names}
        loss = classification_loss(
            model, {**params, **leaves}, buffers, x[batch], y[batch], context, term
        )
        grads = dict(
            zip(names, torch.autograd.grad(loss, [leaves[k] for k in names]), strict=False)
        )
        with torch.no_grad():
            params, momentum = sgd_update(params, grads, momentum, schedule)
        params = {k: v.detach() for k, v in params.items()}
        samples += len(batch)
    return TrainResult(ModelState(params, buffers), len(batches), samples)


@torch.no_grad()
def predict(model: nn.Module, state: ModelState, x: Tensor, batch_size: int = 1024) -> Tensor:
    """Predicted labels of ``model`` with ``state`` on ``x`` (eval mode: BN uses running stats)."""
    model.eval()
    outputs = [
        functional_call(model, (state.params, state.buffers), (chunk,)).argmax(dim=1)
        for chunk in x.split(batch_size)
    ]
    return torch.cat(outputs) if outputs else torch.empty(0, dtype=torch.long, device=x.device)
