"""Per-FedAvg (Fallah, Mokhtari and Ozdaglar, NeurIPS 2020): federated MAML.

The shared model w minimizes F(w) = mean_i f_i(w - alpha grad f_i(w)), the loss
after one personal gradient step. Algorithm 1, per local step on three
independent mini-batches D, D', D'':

* ``w~ = w - alpha grad f_i(w; D)``;
* FO (first-order, eq. 9): ``w <- w - beta grad f_i(w~; D')``;
* HF (Hessian-free, eq. 10): ``w <- w - beta (I - alpha d) grad f_i(w~; D')`` with
  ``d = [grad f_i(w + delta g; D'') - grad f_i(w - delta g; D'')] / (2 delta)``,
  g = grad f_i(w~; D'), the finite-difference Hessian-vector product.

Clients upload w; the server averages as FedAvg does (by training samples). The
personal model is one gradient step of the client's own loss from the global
model it received (Sec. 5: "one step of stochastic gradient descent"): task
``adapt``, step size alpha on one mini-batch, before the local training.

A local step reads 2 (FO) or 3 (HF) mini-batches of ``algorithm.batch_size``
(one batch of that many, split in order), so an epoch is ``n / (2b)`` or
``n / (3b)`` steps; beta is ``algorithm.lr``. The loss is the linear function
``<w, update direction>`` with the direction computed inside it by
``torch.func.grad`` and cut from the graph, so the trainer's SGD step is the
paper's step, and every forward and backward pass of it is metered.

Two algorithms are registered: ``perfedavg`` (FO) and ``perfedavg_hf``. The
authors published no code. Defaults alpha = 0.01 and delta = 0.001 are
mecsim's choices (the paper tunes its step sizes per dataset); beta is
``algorithm.lr``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, ServerState, Task
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.losses import cross_entropy, inner_product
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, TensorDict
from mecsim.learning.training import Batch, Forward, Loss, Schedule


class PerFedAvgSettings(AlgorithmSettings):
    alpha: float = Field(default=0.01, gt=0, description="alpha: the personal step size")
    delta: float = Field(
        default=1e-3, gt=0, description="delta: finite-difference step of the HF variant"
    )
    hessian_product: Literal["finite_difference", "exact"] = Field(
        default="finite_difference",
        description="HF's Hessian-vector product: the paper's finite difference (eq. 10) or "
        "the exact one (forward-over-reverse autodiff)",
    )


def batch_gradient(forward: Forward, at: TensorDict, x: torch.Tensor, y: torch.Tensor):
    """grad f(at; (x, y)) of the mean cross-entropy, by ``torch.func.grad`` (detached)."""

    def objective(params: TensorDict) -> torch.Tensor:
        return cross_entropy(forward(x, params)["logits"], y)

    return {k: v.detach() for k, v in torch.func.grad(objective)(at).items()}


def hessian_vector(forward: Forward, at: TensorDict, vector: TensorDict, x, y) -> TensorDict:
    """H(at; (x, y)) vector, exactly: the directional derivative of the gradient."""

    def gradient(params: TensorDict) -> TensorDict:
        return torch.func.grad(lambda p: cross_entropy(forward(x, p)["logits"], y))(params)

    _, product = torch.func.jvp(gradient, (at,), (vector,))
    return {k: v.detach() for k, v in product.items()}


def maml_loss(split: str, alpha: float, delta: float | None, exact: bool = False) -> Loss:
    """``<w, direction>``: FO's direction ``grad f(w~; D')``; with ``delta``, HF's
    ``(I - alpha d) grad f(w~; D')`` (eq. 10), d the finite-difference Hessian-vector
    product at step delta, or the exact product (``exact``)."""
    parts = 2 if delta is None else 3

    def loss(forward: Forward, params: TensorDict, batch: Batch, consts: TensorDict):
        data = batch[split]
        xs, ys = data["x"].chunk(parts), data["y"].chunk(parts)
        w = {k: v.detach() for k, v in params.items()}
        step = batch_gradient(forward, w, xs[0], ys[0])
        adapted = {k: v - alpha * step[k] for k, v in w.items()}  # w~
        direction = batch_gradient(forward, adapted, xs[1], ys[1])
        if delta is not None and exact:
            product = hessian_vector(forward, w, direction, xs[2], ys[2])
            direction = {k: g - alpha * product[k] for k, g in direction.items()}
        elif delta is not None:
            plus = {k: v + delta * direction[k] for k, v in w.items()}
            minus = {k: v - delta * direction[k] for k, v in w.items()}
            up = batch_gradient(forward, plus, xs[2], ys[2])
            down = batch_gradient(forward, minus, xs[2], ys[2])
            direction = {
                k: g - alpha * (up[k] - down[k]) / (2 * delta) for k, g in direction.items()
            }
        return inner_product(params, direction)

    return loss


def one_personal_step(algorithm: PerFedAvg, task: Task) -> Schedule:
    """One SGD step of size alpha on one mini-batch (Sec. 5's personalization)."""
    s = algorithm.settings
    return Schedule(1, 1, s.batch_size, s.alpha)


def maml_schedule(algorithm: PerFedAvg, task: Task) -> Schedule:
    """The local SGD settings, each step reading 2 (FO) or 3 (HF) mini-batches."""
    base = algorithm.schedule(task)
    size = algorithm.settings.batch_size * algorithm.parts
    return dataclasses.replace(base, batch_size=size)


def maml_step_loss(algorithm: PerFedAvg, task: Task) -> Loss:
    s = algorithm.settings
    delta = s.delta if algorithm.hessian_free else None
    return maml_loss(task.split, s.alpha, delta, exact=s.hessian_product == "exact")


@ALGORITHMS.register("perfedavg", "Per-FedAvg (FO): first-order federated MAML, one-step personal")
class PerFedAvg(FedAvg):
    """FedAvg of the MAML objective; personal model = one step from the global model."""

    Settings = PerFedAvgSettings
    hessian_free = False
    # both tasks start from the received model (FedAvg's begin_task)
    adapt = Task("adapt", model="personal", schedule=one_personal_step)
    local = Task("local", model="local", uploads=True, schedule=maml_schedule, loss=maml_step_loss)
    tasks = (adapt, local)

    @property
    def parts(self) -> int:
        """Mini-batches a local step reads: D, D' (and D'' for HF)."""
        return 3 if self.hessian_free else 2

    def init_client_state(self, client: int) -> ClientState:
        return {}

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state.get("personal", server_state["global"])


@ALGORITHMS.register(
    "perfedavg_hf", "Per-FedAvg (HF): federated MAML, finite-difference Hessian-vector product"
)
class PerFedAvgHF(PerFedAvg):
    """Per-FedAvg with the Hessian-free correction (eq. 10)."""

    hessian_free = True
