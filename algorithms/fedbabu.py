"""FedBABU (Oh et al., ICLR 2022): body aggregation, body update; the head stays at its random init.

During federated training the head is frozen at its (shared, seeded)
initialization and only the body trains, is uploaded and averaged
(Algorithm 1). The personalized model of a client is the global model with
its head fine-tuned on the client's data (Sec. 3, "fine-tuning"): the
``finetune`` task, tau_f epochs on the head, after the upload. The generic
model is the global body with the initial head.
"""

from __future__ import annotations

import dataclasses

from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, RoundContext, ServerState, Task
from mecsim.algorithms.fedper import FedPer
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.state import ModelState, Payload
from mecsim.training import Schedule


class FedBABUSettings(AlgorithmSettings):
    finetune_epochs: int = Field(default=5, ge=1, description="tau_f: head fine-tuning epochs")
    finetune_steps: int | None = Field(default=None, ge=1, description="overrides finetune_epochs")


@ALGORITHMS.register("fedbabu", "FedBABU: head frozen at init, body shared; head fine-tuned")
class FedBABU(FedPer):
    """Body-only federated training, head fine-tuning for personalization."""

    Settings = FedBABUSettings
    tasks = (Task("body", model="local", uploads=True), Task("finetune", model="personal"))

    def schedule(self, task: Task) -> Schedule:
        base = super().schedule(task)
        arch = self.arch(None)
        head = frozenset(arch.head.param_names)
        if task.name == "finetune":
            s = self.settings
            steps = s.finetune_steps or s.steps
            return dataclasses.replace(base, epochs=s.finetune_epochs, steps=steps, trainable=head)
        return dataclasses.replace(base, trainable=frozenset(arch.initial.params) - head)

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        assert payload is not None, "FedBABU clients start from the global body"
        return self.initial.merge(payload)  # the global body under the initial head

    def generic_model(self, server_state: ServerState) -> ModelState:
        return server_state["global"]

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state.get("personal", server_state["global"])
