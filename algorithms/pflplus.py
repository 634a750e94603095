"""PFL+ base: one generic model shared through the server, one personalized model per client.

Every round each client runs two tasks (Algorithm 1 of Chen et al. 2023):

1. ``generic`` - train the received global model w_G^{t-1} into w_{G,i}^t;
   this task produces the upload;
2. ``personal`` - train the client's own w_{p,i}^{t-1} into w_{p,i}^t.

Compute-and-wait runs both, then uploads; wait-free uploads after
``generic`` and trains ``personal`` during the communication window. The
server aggregates the generic models as FedAvg does. Subclasses (Ditto,
FedRoD, spectral co-distillation) supply losses; none has protocol code.
"""

from __future__ import annotations

from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, RoundContext, Task
from mecsim.algorithms.fedavg import FedAvg
from mecsim.learning.state import ModelState, Payload
from mecsim.learning.training import Schedule


class PFLPlusSettings(AlgorithmSettings):
    """Generic-model training uses ``epochs``/``steps``/``lr``; the personal task its own."""

    personal_epochs: int = Field(
        default=1, ge=1, description="E_p: local epochs of the personal task"
    )
    personal_steps: int | None = Field(default=None, ge=1, description="overrides personal_epochs")
    personal_lr: float | None = Field(default=None, gt=0, description="eta_p (default: lr)")


def personal_schedule(algorithm: PFLPlus, task: Task) -> Schedule:
    """The personal task's own epochs (or steps) and rate; the rest of the SGD settings."""
    s = algorithm.settings
    return Schedule(
        s.personal_epochs,
        s.personal_steps,
        s.batch_size,
        s.personal_lr or s.lr,
        s.momentum,
        s.weight_decay,
    )


def own_personal_model(
    algorithm: PFLPlus, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> ModelState:
    """w_{p,i}^{t-1}: the client's own personalized model."""
    return state["personal"]


class PFLPlus(FedAvg):
    """FedAvg on the generic model plus a personalized model per client (no coupling term)."""

    Settings = PFLPlusSettings
    hierarchical = True  # the generic model goes up and is averaged as FedAvg's: edge, then cloud
    generic = Task("generic", model="generic", uploads=True)  # from the received w_G
    personal = Task(
        "personal", model="personal", start=own_personal_model, schedule=personal_schedule
    )
    tasks = (generic, personal)

    def init_client_state(self, client: int) -> ClientState:
        return {"personal": self.initial.clone()}

    def receive(self, state: ClientState, payload: Payload, ctx: RoundContext) -> None:
        """Keep the latest global model as the generic reference of the personal task."""
        state["generic"] = ModelState.from_payload(payload, self.initial)

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        return state["generic"].to_payload()

    def personal_model(self, client_state: ClientState, server_state: dict) -> ModelState:
        return client_state["personal"]
