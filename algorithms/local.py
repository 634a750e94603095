"""Local training: each client trains its own model alone, nothing is communicated.

The no-collaboration baseline of the PFL papers. Only personalized accuracy
(each client's model on its local test split) is defined. Clients may have
different architectures.
"""

from __future__ import annotations

from mecsim.algorithms.base import Algorithm, ClientState, ServerState, Task
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState


@ALGORITHMS.register("local", "each client trains alone; no communication")
class Local(Algorithm):
    """Each client trains alone from its architecture's initial model."""

    tasks = (Task("local", model="personal"),)
    protocols = frozenset({"compute_and_wait", "deadline"})
    heterogeneous = True

    def init_client_state(self, client: int) -> ClientState:
        return {"personal": self.arch(client).initial.clone()}

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state["personal"]
