"""FedRoD (Chen & Chao, ICLR 2022): a generic head trained with balanced softmax, a personal head on top.

* Generic task: the whole model (body + generic head) trains with the
  balanced-softmax loss ``CE(logits + log pi_i, y)``, where pi_i is client
  i's label distribution; this model is uploaded and averaged (FedAvg).
* Personal task: the personal head h_p trains with plain CE on the summed
  logits ``h_G(z) + h_p(z)`` of the updated generic body z, body and generic
  head frozen.

The head is the model's last (linear) layer, so the summed logits are the
same architecture with head weights W_G + W_p: the personal model is stored
that way, and only the head is trainable in the personal task.
"""

from __future__ import annotations

import dataclasses

import torch

from mecsim.algorithms.base import ClientState, RoundContext, Task
from mecsim.algorithms.losses import cross_entropy, cross_entropy_loss
from mecsim.algorithms.pflplus import PFLPlus
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import Loss, Schedule, TrainResult

MIN_PRIOR = 1e-8  # classes a client never saw get log(1e-8) instead of -inf


def balanced_softmax_loss(split: str) -> Loss:
    """CE(logits + log pi, y): logit adjustment by the client's label prior ``consts['log_prior']``."""

    def loss(forward, params, batch, consts):
        data = batch[split]
        return cross_entropy(forward(data["x"])["logits"] + consts["log_prior"], data["y"])

    return loss


@ALGORITHMS.register("fedrod", "FedRoD: balanced-softmax generic head + personal head (PFL+)")
class FedRoD(PFLPlus):
    """PFL+ with a balanced-softmax generic model and an additive personal head."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.head = self.arch(None).head.param_names

    def init_client_state(self, client: int) -> ClientState:
        counts = self.label_counts[client].float() if self.label_counts else None
        num_classes = self.initial.params[self.head[0]].shape[0]
        prior = (
            counts / counts.sum()
            if counts is not None
            else torch.full((num_classes,), 1 / num_classes)
        )
        return {
            "personal": self.initial.clone(),
            "personal_head": {k: torch.zeros_like(self.initial.params[k]) for k in self.head},
            "log_prior": prior.clamp_min(MIN_PRIOR)
            .log()
            .to(self.initial.params[self.head[0]].device),
        }

    def schedule(self, task: Task) -> Schedule:
        schedule = super().schedule(task)
        if task.name == "personal":
            return dataclasses.replace(schedule, trainable=frozenset(self.head))
        return schedule

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        if task.name == "generic":
            return super().begin_task(task, state, payload, ctx)
        generic = state["generic"]
        params = dict(generic.params)
        for k in self.head:
            params[k] = generic.params[k] + state["personal_head"][k]
        return ModelState(params, generic.buffers)

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        return {"log_prior": state["log_prior"]} if task.name == "generic" else {}

    def loss(self, task: Task) -> Loss:
        if task.name == "generic":
            return balanced_softmax_loss(task.split)
        return cross_entropy_loss(task.split)

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        super().end_task(task, state, result, ctx)
        if task.name == "personal":
            state["personal_head"] = {
                k: result.state.params[k] - state["generic"].params[k] for k in self.head
            }
