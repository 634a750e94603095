"""FedProx (Li et al., MLSys 2020): FedAvg plus a proximal term.

Local objective: ``f_i(w) + mu/2 ||w - w_G||^2`` where w_G is the global
model the round started from. Everything else is FedAvg.
"""

from __future__ import annotations

from mecsim.algorithms.base import ClientState, Task, l2_distance_squared
from mecsim.algorithms.fedavg import FedAvg
from pydantic import Field

from mecsim.scenario import AlgorithmSettings
from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import LossTerm


class FedProxSettings(AlgorithmSettings):
    mu: float = Field(default=0.01, ge=0, description="proximal coefficient")


class FedProx(FedAvg):
    """FedAvg with the proximal term mu/2 ||w - w_G||^2."""

    Settings = FedProxSettings

    def task_context(self, task: Task, state: ClientState, payload: Payload | None) -> TensorDict:
        return {k: payload[k] for k in self.initial.params} if payload else {}

    def loss_term(self, task: Task) -> LossTerm:
        mu = self.settings.mu
        return lambda params, global_params: mu / 2 * l2_distance_squared(params, global_params)

    def extra_flops(self, task: Task, start: ModelState, steps: int) -> int:
        # per parameter: subtract, square, accumulate; and the gradient mu (w - w_G)
        return 5 * start.num_params() * steps
