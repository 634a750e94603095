"""FedAvg (McMahan et al., 2017).

Each round the server broadcasts the global model w_G; each selected client
runs local SGD from w_G and uploads w_i; the server sets
``w_G <- sum_i (n_i / n) w_i`` over the selected clients (n_i: client
training samples). FedAvg has no personalized model: its "personalized"
accuracy is the global model on each client's local test split.

Subclasses that move only part of the model override :meth:`shared_keys`:
downloads then merge into the client's own model and averaging is per key.
"""

from __future__ import annotations

from mecsim.algorithms.aggregate import weighted_average
from mecsim.algorithms.base import (
    Algorithm,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload


@ALGORITHMS.register("fedavg", "FedAvg: weighted averaging of full models (McMahan et al. 2017)")
class FedAvg(Algorithm):
    """Federated averaging of full models."""

    tasks = (Task("local", model="local", uploads=True),)
    client_blind_costs = True

    def shared_keys(self) -> tuple[str, ...] | None:
        """Model entries that move between server and clients; None: all of them."""
        return None

    def init_server_state(self) -> ServerState:
        return {"global": self.initial.clone()}

    def init_client_state(self, client: int) -> ClientState:
        return {}

    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload:
        keys = self.shared_keys()
        model: ModelState = server_state["global"]
        return model.to_payload() if keys is None else model.select(keys)

    def received_model(self, state: ClientState, payload: Payload) -> ModelState:
        """The model a client holds after receiving ``payload``: the global model, or
        its own model (key ``local``) with the shared entries replaced."""
        if self.shared_keys() is None:
            return ModelState.from_payload(payload, self.initial)
        return state.get("local", self.initial).merge(payload)

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        assert payload is not None, f"{type(self).__name__} clients start from the downlink"
        return self.received_model(state, payload)

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        keys = self.shared_keys()
        model: ModelState = state["local"]
        return model.to_payload() if keys is None else model.select(keys)

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        average = weighted_average(
            [u.payload for u in uploads], [u.aggregation_weight for u in uploads]
        )
        return {**server_state, "global": server_state["global"].merge(average)}

    def generic_model(self, server_state: ServerState) -> ModelState | None:
        return server_state["global"] if self.shared_keys() is None else None

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        if self.shared_keys() is None:
            return server_state["global"]
        return client_state.get("local", server_state["global"])
