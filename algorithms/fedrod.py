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
from mecsim.algorithms.base import ClientState, Task
from mecsim.algorithms.pflplus import PFLPlus

from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import Schedule

MIN_PRIOR = 1e-8  # classes a client never saw get log(1e-8) instead of -inf


class FedRoD(PFLPlus):
    """PFL+ with a balanced-softmax generic model and an additive personal head."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        last = next(reversed(self.initial.params)).rsplit(".", 1)[0]
        self.head = tuple(k for k in self.initial.params if k.rsplit(".", 1)[0] == last)

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

    def begin_task(self, task: Task, state: ClientState, payload: Payload | None) -> ModelState:
        if task.name == "generic":
            return super().begin_task(task, state, payload)
        generic = state["generic"]
        params = dict(generic.params)
        for k in self.head:
            params[k] = generic.params[k] + state["personal_head"][k]
        return ModelState(params, generic.buffers)

    def task_context(self, task: Task, state: ClientState, payload: Payload | None) -> TensorDict:
        return {"logit_bias": state["log_prior"]} if task.name == "generic" else {}

    def end_task(self, task: Task, state: ClientState, trained: ModelState) -> None:
        super().end_task(task, state, trained)
        if task.name == "personal":
            state["personal_head"] = {
                k: trained.params[k] - state["generic"].params[k] for k in self.head
            }
