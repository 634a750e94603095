"""MOON (Li, He & Song, CVPR 2021): model-contrastive federated learning.

Local objective (eq. 3): ``l = CE(w; x, y) + mu * l_con`` with the
model-contrastive loss (eq. 2)

    l_con = -log( exp(sim(z, z_glob) / tau) /
                  (exp(sim(z, z_glob) / tau) + exp(sim(z, z_prev) / tau)) )

where z, z_glob, z_prev are the representations of x under the local model
being trained, the global model it started from, and the client's model of
its previous round; sim is cosine similarity. The representation is the
``features`` output (the classifier head's input; MOON's projection head is
not part of mecsim's models). Defaults: mu = 1, tau = 0.5 (Sec. 4.1). The
server averages as FedAvg.
"""

from __future__ import annotations

import torch
from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, RoundContext, Task
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.losses import (
    cosine_similarity,
    cross_entropy,
    detached,
    prefixed,
    unprefixed,
)
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import Loss, TrainResult


class MOONSettings(AlgorithmSettings):
    mu: float = Field(default=1.0, ge=0, description="weight of the contrastive loss")
    temperature: float = Field(default=0.5, gt=0, description="tau of the contrastive loss")


@ALGORITHMS.register("moon", "MOON: model-contrastive loss on features (Li et al. 2021)")
class MOON(FedAvg):
    """FedAvg with the model-contrastive term."""

    Settings = MOONSettings

    def init_client_state(self, client: int) -> ClientState:
        return {"previous": self.initial.clone()}

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        assert payload is not None, "MOON clients start from the global model"
        glob = ModelState.from_payload(payload, self.initial)
        return {**prefixed("global.", glob), **prefixed("previous.", state["previous"])}

    def loss(self, task: Task) -> Loss:
        mu, tau = self.settings.mu, self.settings.temperature
        arch = self.arch(None)
        params_of = lambda d: {k: v for k, v in d.items() if k in arch.initial.params}  # noqa: E731
        buffers_of = lambda d: {k: v for k, v in d.items() if k in arch.initial.buffers}  # noqa: E731

        def moon_loss(forward, params, batch, consts):
            data = batch[task.split]
            out = forward(data["x"])
            views = []
            for prefix in ("global.", "previous."):
                other = unprefixed(prefix, consts)
                views.append(
                    detached(forward(data["x"], params_of(other), buffers_of(other)))["features"]
                )
            z = out["features"]
            positive = cosine_similarity(z, views[0]) / tau
            negative = cosine_similarity(z, views[1]) / tau
            contrastive = -(positive - torch.logsumexp(torch.stack([positive, negative]), 0))
            return cross_entropy(out["logits"], data["y"]) + mu * contrastive.mean()

        return moon_loss

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        super().end_task(task, state, result, ctx)
        state["previous"] = result.state
