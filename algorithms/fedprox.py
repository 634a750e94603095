"""FedProx (Li et al., MLSys 2020): FedAvg plus a proximal term.

Local objective (eq. 2): ``h_i(w) = f_i(w) + mu/2 ||w - w_G||^2`` where w_G
is the global model the round started from. Everything else is FedAvg.
"""

from __future__ import annotations

from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, RoundContext, Task
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.losses import proximal_cross_entropy
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import Payload, TensorDict
from mecsim.learning.training import Loss


class FedProxSettings(AlgorithmSettings):
    mu: float = Field(default=0.01, ge=0, description="proximal coefficient mu")


@ALGORITHMS.register(
    "fedprox", "FedProx: FedAvg + proximal term mu/2||w - w_G||^2 (Li et al. 2020)"
)
class FedProx(FedAvg):
    """FedAvg with the proximal term mu/2 ||w - w_G||^2."""

    Settings = FedProxSettings

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        return {k: payload[k] for k in self.initial.params} if payload else {}

    def loss(self, task: Task) -> Loss:
        return proximal_cross_entropy(task.split, self.settings.mu)
