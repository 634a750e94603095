"""pFedMe (T. Dinh, Tran and Nguyen, NeurIPS 2020): personalization by Moreau envelopes.

Client i's personal model is the proximal point of its loss at the local model w:

    theta_i(w) = argmin_theta f_i(theta; D) + lambda/2 ||theta - w||^2        (eq. 7)

Algorithm 1, per local round r = 0..R-1 on a fresh mini-batch D:

* theta~ <- K steps of gradient descent (personal rate eta_p) on (7), from w;
* ``w <- w - eta lambda (w - theta~)``: a gradient step on the Moreau envelope.

The client uploads w_i^R; the server steps ``w <- (1 - beta) w + beta mean_i(w_i^R)``
(beta = 1 is FedAvg's average; the paper also runs beta = 2). The personal
model evaluated is theta_i(w_i^R): task ``personalize`` solves (7) at the
uploaded w with K steps on one mini-batch.

One SGD step of the ``local`` task is one local round: its loss is
``lambda/2 ||w - theta~||^2`` with theta~ computed inside the loss by
``torch.func.grad`` (so it runs under vmap) and cut from the graph, whose
gradient is ``lambda (w - theta~)``; ``algorithm.lr`` is eta and
``algorithm.steps`` R. The inner steps' forward and backward passes are
metered like any other, element-wise work (the proximal term, the inner
updates) included (:mod:`mecsim.learning.cost`).

Paper and authors' code (``CharlieDinh/pFedMe``) differ in two places:

* the server average: uniform over the selected clients in Algorithm 1
  (``server_weights = "uniform"``, default), by training samples in the code
  (``"data_size"``);
* theta~ is warm-started in the code from the previous local round's theta~; here
  every local round starts it from w (the paper does not say). Not offered: a
  loss keeps no state between steps.

Defaults are the paper's MNIST settings: lambda = 15, K = 5, eta_p = 0.1, beta = 1.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from mecsim.algorithms.aggregate import weighted_average
from mecsim.algorithms.base import (
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.losses import (
    cross_entropy,
    proximal,
    proximal_cross_entropy,
)
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import Batch, Forward, Loss, Schedule


class PFedMeSettings(AlgorithmSettings):
    lam: float = Field(default=15.0, gt=0, description="lambda: Moreau-envelope coupling")
    inner_steps: int = Field(default=5, ge=1, description="K: gradient steps solving (7)")
    personal_lr: float = Field(default=0.1, gt=0, description="eta_p: step size solving (7)")
    beta: float = Field(default=1.0, gt=0, le=2, description="beta: server mixing (1: average)")
    server_weights: Literal["uniform", "data_size"] = Field(
        default="uniform",
        description="the server's mean: 'uniform' over the selected clients (the paper's "
        "Algorithm 1) or 'data_size', by training samples (the authors' code)",
    )


def moreau_point(
    forward: Forward, anchor: TensorDict, data: dict, lam: float, steps: int, lr: float
) -> TensorDict:
    """theta~: ``steps`` gradient steps on f(theta; data) + lam/2 ||theta - anchor||^2
    from ``anchor`` (eq. 7), with ``torch.func.grad``; returned detached."""

    def objective(theta: TensorDict) -> torch.Tensor:
        logits = forward(data["x"], theta)["logits"]
        return cross_entropy(logits, data["y"]) + lam / 2 * proximal(theta, anchor)

    gradient = torch.func.grad(objective)
    theta = dict(anchor)
    for _ in range(steps):
        g = gradient(theta)
        theta = {k: v - lr * g[k] for k, v in theta.items()}
    return {k: v.detach() for k, v in theta.items()}


def envelope_loss(split: str, lam: float, steps: int, lr: float) -> Loss:
    """lam/2 ||w - theta~(w)||^2 with theta~ cut from the graph: its gradient is the
    Moreau envelope's, ``lam (w - theta~)`` (Algorithm 1, line 8)."""

    def loss(forward: Forward, params: TensorDict, batch: Batch, consts: TensorDict):
        anchor = {k: v.detach() for k, v in params.items()}
        theta = moreau_point(forward, anchor, batch[split], lam, steps, lr)
        return lam / 2 * proximal(params, theta)

    return loss


def local_round_loss(algorithm: PFedMe, task: Task) -> Loss:
    s = algorithm.settings
    return envelope_loss(task.split, s.lam, s.inner_steps, s.personal_lr)


def uploaded_model(
    algorithm: PFedMe, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> ModelState:
    """theta starts at the w the client uploads."""
    return state["local"]


def anchored_at_w(
    algorithm: PFedMe, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> TensorDict:
    """w, the anchor of eq. (7)."""
    return dict(state["local"].params)


def inner_solve(algorithm: PFedMe, task: Task) -> Schedule:
    """K steps at eta_p on one mini-batch: one solve of eq. (7)."""
    s = algorithm.settings
    return Schedule(1, s.inner_steps, s.batch_size, s.personal_lr)


def moreau_objective_loss(algorithm: PFedMe, task: Task) -> Loss:
    """f(theta) + lambda/2 ||theta - w||^2 (eq. 7)."""
    return proximal_cross_entropy(task.split, algorithm.settings.lam)


@ALGORITHMS.register("pfedme", "pFedMe: Moreau-envelope personal models, beta-mixed server")
class PFedMe(FedAvg):
    """FedAvg on w with Moreau-envelope local steps and a personal theta per client."""

    Settings = PFedMeSettings
    protocols = frozenset({"compute_and_wait", "deadline"})
    # Algorithm 1, lines 5-8: R local rounds on the Moreau envelope, from the received w
    local = Task("local", model="local", uploads=True, loss=local_round_loss)
    # the personal model: theta(w) by eq. (7) at the uploaded w
    personalize = Task(
        "personalize", model="personal", start=uploaded_model, constants=anchored_at_w,
        schedule=inner_solve, loss=moreau_objective_loss,
    )  # fmt: skip
    tasks = (local, personalize)

    def init_client_state(self, client: int) -> ClientState:
        return {}

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        s = self.settings
        weights = [
            u.aggregation_weight if s.server_weights == "data_size" else 1.0 for u in uploads
        ]
        average = weighted_average([u.payload for u in uploads], weights)
        current = server_state["global"].to_payload()
        mixed = {
            k: (1 - s.beta) * current[k] + s.beta * v if v.is_floating_point() else v
            for k, v in average.items()
        }
        return {**server_state, "global": server_state["global"].merge(mixed)}

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        return super().aggregation_flops(server_state, uploads) + 3 * self.initial.num_params()

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state.get("personal", server_state["global"])
