"""Local training: each client trains its own model alone, nothing is communicated.

The no-collaboration baseline of the PFL papers. Only personalized accuracy
(each client's model on its local test split) is defined.
"""

from __future__ import annotations

from mecsim.algorithms.base import Algorithm, ClientState, ServerState, Task

from mecsim.state import ModelState


class Local(Algorithm):
    """Each client trains alone from the shared initial model."""

    tasks = (Task("local", model="personal"),)

    def init_client_state(self, client: int) -> ClientState:
        return {"personal": self.initial.clone()}

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state["personal"]
