"""FedRep (Collins et al., ICML 2021): shared representation, local heads (Algorithm 1).

Each round a selected client, starting from the global body phi and its own
head h_i:

1. ``head`` - tau_h epochs on the head, body frozen (line 6);
2. ``body`` - tau epochs on the body, head frozen (line 7); the body is uploaded.

The server averages the bodies (line 9). Only the body moves; the
personalized model is the client's body + head.
"""

from __future__ import annotations

import dataclasses

from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, RoundContext, Task
from mecsim.algorithms.fedper import FedPer
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.state import ModelState, Payload
from mecsim.training import Schedule


class FedRepSettings(AlgorithmSettings):
    head_epochs: int = Field(default=10, ge=1, description="tau_h: head epochs before the body")
    head_steps: int | None = Field(default=None, ge=1, description="overrides head_epochs")


@ALGORITHMS.register("fedrep", "FedRep: head epochs then body epochs; only the body moves")
class FedRep(FedPer):
    """Alternating head and body updates; the body is shared."""

    Settings = FedRepSettings
    tasks = (Task("head", model="local"), Task("body", model="local", uploads=True))

    def schedule(self, task: Task) -> Schedule:
        base = super().schedule(task)
        arch = self.arch(None)
        if task.name == "head":
            s = self.settings
            base = dataclasses.replace(base, epochs=s.head_epochs, steps=s.head_steps or s.steps)
            return dataclasses.replace(base, trainable=frozenset(arch.head.param_names))
        body = {n for layer in arch.layers[:-1] for n in layer.param_names}
        return dataclasses.replace(base, trainable=frozenset(body))

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        if task.name == "head":  # the new global body under the client's own head
            return super().begin_task(task, state, payload, ctx)
        return state["local"]
