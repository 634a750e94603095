"""FedAvg (McMahan et al., 2017).

Each round the server broadcasts the global model w_G; each selected client
runs local SGD from w_G and uploads w_i; the server sets
``w_G <- sum_i (n_i / n) w_i`` over the selected clients (n_i: client
training samples). FedAvg has no personalized model: its "personalized"
accuracy is the global model on each client's local test split.
"""

from __future__ import annotations

from mecsim.algorithms.aggregate import weighted_average
from mecsim.algorithms.base import Algorithm, ClientState, ServerState, Task, Upload

from mecsim.state import ModelState, Payload


class FedAvg(Algorithm):
    """Federated averaging of full models."""

    tasks = (Task("local", model="local", uploads=True),)

    def init_server_state(self) -> ServerState:
        return {"global": self.initial.clone()}

    def init_client_state(self, client: int) -> ClientState:
        return {}

    def downlink(self, server_state: ServerState, client: int | None) -> Payload:
        return server_state["global"].to_payload()

    def begin_task(self, task: Task, state: ClientState, payload: Payload | None) -> ModelState:
        assert payload is not None, "FedAvg clients start from the broadcast global model"
        return ModelState.from_payload(payload, self.initial)

    def upload(self, client_state: ClientState) -> Payload:
        return client_state["local"].to_payload()

    def aggregate(self, server_state: ServerState, uploads: list[Upload]) -> ServerState:
        average = weighted_average(
            [u.payload for u in uploads], [u.aggregation_weight for u in uploads]
        )
        return {**server_state, "global": ModelState.from_payload(average, self.initial)}

    def generic_model(self, server_state: ServerState) -> ModelState:
        return server_state["global"]

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return server_state["global"]
