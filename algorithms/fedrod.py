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
from mecsim.algorithms.losses import cross_entropy
from mecsim.algorithms.pflplus import PFLPlus, personal_schedule
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import Loss, Schedule, TrainResult

MIN_PRIOR = 1e-8  # classes a client never saw get log(1e-8) instead of -inf


def balanced_softmax_loss(split: str) -> Loss:
    """CE(logits + log pi, y): logit adjustment by the client's label prior ``consts['log_prior']``."""

    def loss(forward, params, batch, consts):
        data = batch[split]
        return cross_entropy(forward(data["x"])["logits"] + consts["log_prior"], data["y"])

    return loss


def prior_constants(
    algorithm: FedRoD, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> TensorDict:
    """log pi_i, the client's label prior, for the balanced softmax."""
    return {"log_prior": state["log_prior"]}


def head_schedule(algorithm: FedRoD, task: Task) -> Schedule:
    """The personal task's schedule, training the head alone."""
    return dataclasses.replace(
        personal_schedule(algorithm, task), trainable=frozenset(algorithm.head)
    )


def generic_plus_personal_head(
    algorithm: FedRoD, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> ModelState:
    """The trained generic model with the client's personal head added to its head."""
    generic = state["generic"]
    params = dict(generic.params)
    for k in algorithm.head:
        params[k] = generic.params[k] + state["personal_head"][k]
    return ModelState(params, generic.buffers)


def keep_personal_head(
    algorithm: FedRoD, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
) -> None:
    """Store the personal model and its head's offset from the generic head."""
    state["personal"] = result.state
    state["personal_head"] = {
        k: result.state.params[k] - state["generic"].params[k] for k in algorithm.head
    }


@ALGORITHMS.register("fedrod", "FedRoD: balanced-softmax generic head + personal head (PFL+)")
class FedRoD(PFLPlus):
    """PFL+ with a balanced-softmax generic model and an additive personal head."""

    generic = dataclasses.replace(
        PFLPlus.generic,
        loss=lambda algorithm, task: balanced_softmax_loss(task.split),
        constants=prior_constants,
    )
    personal = dataclasses.replace(
        PFLPlus.personal,
        start=generic_plus_personal_head,
        schedule=head_schedule,
        finish=keep_personal_head,
    )
    tasks = (generic, personal)

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
