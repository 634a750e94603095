"""FedMD (Li & Wang, NeurIPS FL workshop 2019): heterogeneous FL by model distillation.

Clients own models of any architecture and a *labeled* public set P.

Round 0, transfer learning: each client trains on P (with its labels) for
``transfer_epochs`` epochs, then on its private split for as many epochs,
then communicates its class scores on P.

Round t >= 1, client (the paper's steps, after the server's):

    digest   train on P to approach the consensus (mean absolute error
             between its class scores and the consensus)
    revisit  train on the private split (cross-entropy)
    logits   communicate f_k(P), its class scores (logits)         (|P| x N floats)

Server, aggregate: the consensus is the plain average of the class scores,
(1/m) sum_k f_k(P), broadcast to every selected client.

Choices the paper leaves open, and the values taken:

* Class scores are the logits (the paper removes the softmax for the
  alignment); the digest loss is the mean absolute error, as in the authors'
  code.
* The paper draws a fresh subset of P every round; mecsim uses all of P
  (set ``data.public_size`` to the subset size), so bytes per round are fixed.
* The paper has every client in every round (C = 1); partial participation
  works (the consensus is over the clients that uploaded).
"""

from __future__ import annotations

import dataclasses

from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import RoundContext, ServerState, Task, Upload
from mecsim.algorithms.logit_exchange import LogitExchange, LogitExchangeSettings, TargetLoss
from mecsim.algorithms.losses import cross_entropy_loss, mean_absolute_error
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.training import Loss, Schedule


class FedMDSettings(LogitExchangeSettings):
    transfer_epochs: int = Field(
        default=5, ge=1, description="round-0 epochs on P (labeled), then on the private split"
    )


@ALGORITHMS.register("fedmd", "FedMD: transfer learning, then consensus of class scores on P")
class FedMD(LogitExchange):
    """Transfer learning on labeled public data, then digest/revisit rounds."""

    Settings = FedMDSettings
    public_data = "labeled"
    distill_task = Task("digest", model="local", split="public")
    local_task = Task("revisit", model="local")
    transfer_public = Task("transfer:public", model="local", split="public")
    transfer_private = Task("transfer:private", model="local")

    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        if round_ == 0:
            return (self.transfer_public, self.transfer_private, self.predict_task)
        return super().round_tasks(round_)

    def schedule(self, task: Task) -> Schedule:
        schedule = super().schedule(task)  # the local keys, except for digest
        if task == self.transfer_public:  # supervised on P: the public batch size
            schedule = dataclasses.replace(schedule, batch_size=self.settings.public_batch_size)
        if task in (self.transfer_public, self.transfer_private):
            return dataclasses.replace(schedule, epochs=self.settings.transfer_epochs, steps=None)
        return schedule

    def loss(self, task: Task) -> Loss:
        if task == self.transfer_public:
            return cross_entropy_loss("public")
        return super().loss(task)

    def prediction(self, logits: Tensor) -> Tensor:
        """Class scores: the logits themselves."""
        return logits

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        return {"target": self.stacked(uploads).mean(dim=0)}

    def target_loss(self) -> TargetLoss:
        return mean_absolute_error
