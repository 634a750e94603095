"""KT-pFL (Zhang et al., NeurIPS 2021): parameterized knowledge transfer for personalized FL.

Clients keep their own models (any architecture) and upload soft predictions
s_n = softmax(w_n(P) / T) on the public set P. The server holds a knowledge
coefficient matrix c (N x N, initialized to 1/N) and gives every client its
own soft target, a mixture of everyone's predictions:

    s~_n = sum_m c_nm s_m                                   (personalized target)

c is learned on the server by gradient steps on

    J(c) = lambda sum_n KL(s~_n || s_n) + rho/2 ||c - 1/N||^2

(clients whose predictions agree gain weight in each other's targets; the
penalty keeps c near uniform). Round t, client n (see
:mod:`mecsim.algorithms.logit_exchange`):

    distill  lambda T^2 KL(s~_n || softmax(w_n(x)/T)) on public mini-batches
    local    cross-entropy on the private split
    logits   upload s_n                                      (|P| x N floats)

and its download is its own s~_n (|P| x N floats: one payload per client).

Choices the paper leaves open, and the values taken:

* Partial participation: a round's uploads (clients S) update the block
  c[S, S] only (as KAPC's Algorithm 5 slices its relationship matrix);
  a target mixes the last uploads with row n of c restricted to S,
  renormalized. Rows are normalized inside J too, so every target is a
  distribution, and c is clipped at 0 after each step (the authors' code
  renormalizes rows with a softmax instead).
* ``coefficient_steps`` = 1 step of ``coefficient_lr`` = 0.5 per round,
  lambda = 1, rho = 0.5, T = 1.
* Server FLOPs, in closed form (m uploads, d = |P| N): per step
  3 (2 m^2 d + 6 m d + 5 m^2) + 3 m^2 (forward mixture, KL and penalty; the
  backward pass as twice the forward; the update), plus 2 m^2 d for the
  targets of m clients.
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import RoundContext, ServerState, Upload
from mecsim.algorithms.logit_exchange import (
    LogitExchange,
    LogitExchangeSettings,
    TargetLoss,
    soft_decisions,
)
from mecsim.algorithms.losses import kl_to_target
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import Payload


class KTpFLSettings(LogitExchangeSettings):
    lam: float = Field(default=1.0, ge=0, description="lambda: weight of the distillation term")
    rho: float = Field(default=0.5, ge=0, description="rho: pull of c toward uniform 1/N")
    temperature: float = Field(default=1.0, gt=0, description="T of the soft predictions")
    coefficient_lr: float = Field(default=0.5, gt=0, description="step size on c")
    coefficient_steps: int = Field(default=1, ge=0, le=10_000, description="steps on c per round")


def mixtures(coefficients: Tensor, predictions: Tensor) -> Tensor:
    """Row-normalized ``coefficients`` [n, m] mixing ``predictions`` [m, |P|, N] into [n, |P|, N]."""
    weights = coefficients / coefficients.sum(dim=1, keepdim=True).clamp_min(1e-12)
    return torch.einsum("nm,mpk->npk", weights, predictions)


def coefficient_objective(
    block: Tensor, predictions: Tensor, lam: float, rho: float, num_clients: int
) -> Tensor:
    """J on the uploaders' block: lambda sum_n KL(s~_n || s_n) + rho/2 ||c - 1/N||^2
    (KL averaged over the public samples)."""
    targets = mixtures(block, predictions)
    kl = (torch.xlogy(targets, targets) - torch.xlogy(targets, predictions)).sum(-1).mean(-1)
    return lam * kl.sum() + rho / 2 * ((block - 1.0 / num_clients) ** 2).sum()


def update_coefficients(
    block: Tensor, predictions: Tensor, settings: KTpFLSettings, num_clients: int
) -> Tensor:
    """``coefficient_steps`` projected gradient steps of J on ``block`` (kept >= 0)."""
    s = settings
    block = block.detach().double()
    predictions = predictions.detach().double().cpu()
    for _ in range(s.coefficient_steps):
        block.requires_grad_(True)
        value = coefficient_objective(block, predictions, s.lam, s.rho, num_clients)
        (grad,) = torch.autograd.grad(value, block)
        block = (block.detach() - s.coefficient_lr * grad).clamp_min(0.0)
    return block.detach()


@ALGORITHMS.register("ktpfl", "KT-pFL: personalized soft targets from a learned coefficient matrix")
class KTpFL(LogitExchange):
    """Each client distills toward its own mixture of everyone's soft predictions."""

    Settings = KTpFLSettings
    broadcast = False

    @property
    def num_clients(self) -> int:
        return len(self.models.client_arch)

    def init_server_state(self) -> ServerState:
        n = self.num_clients
        return {
            "coefficients": torch.full((n, n), 1.0 / n, dtype=torch.float64),
            "predictions": None,
            "sources": (),
        }

    def prediction(self, logits: Tensor) -> Tensor:
        return soft_decisions(logits, self.settings.temperature)

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        predictions = self.stacked(uploads)
        sources = tuple(u.client for u in uploads)
        coefficients = server_state["coefficients"].clone()
        if not predictions.is_meta:  # cost-only runs keep c uniform
            rows = torch.tensor(sources)
            block = coefficients[rows][:, rows]
            block = update_coefficients(block, predictions, self.settings, self.num_clients)
            coefficients[rows.unsqueeze(1), rows] = block
        return {"coefficients": coefficients, "predictions": predictions, "sources": sources}

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        if not uploads:
            return 0
        m, d = len(uploads), uploads[0].payload["predictions"].numel()
        step = 3 * (2 * m * m * d + 6 * m * d + 5 * m * m) + 3 * m * m
        return self.settings.coefficient_steps * step + 2 * m * m * d

    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload | None:
        predictions = server_state["predictions"]
        if predictions is None:
            return None
        if predictions.is_meta:
            return {"target": torch.empty(predictions.shape[1:], device="meta")}
        columns = torch.tensor(server_state["sources"])
        row = server_state["coefficients"][ctx.client, columns].unsqueeze(0)
        target = mixtures(row.to(predictions.device, predictions.dtype), predictions)[0]
        return {"target": target}

    def target_loss(self) -> TargetLoss:
        lam, temperature = self.settings.lam, self.settings.temperature
        return lambda logits, target: lam * kl_to_target(logits, target, temperature)
