"""Ditto (Li et al., ICML 2021): personalization by a proximal pull toward the global model.

Generic model: trained as in FedAvg. Personal model (per client):
``min_v f_i(v) + lambda/2 ||v - w_G||^2`` with w_G the global model the
client received this round.
"""

from __future__ import annotations

from mecsim.algorithms.base import ClientState, Task, l2_distance_squared
from mecsim.algorithms.pflplus import PFLPlus, PFLPlusSettings
from pydantic import Field

from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import LossTerm


class DittoSettings(PFLPlusSettings):
    lam: float = Field(default=0.1, ge=0, description="lambda: pull of the personal model to w_G")


class Ditto(PFLPlus):
    """PFL+ with the personal loss CE + lambda/2 ||w_p - w_G||^2."""

    Settings = DittoSettings

    def task_context(self, task: Task, state: ClientState, payload: Payload | None) -> TensorDict:
        if task.name != "personal" or not payload:
            return {}
        return {k: payload[k] for k in self.initial.params}

    def loss_term(self, task: Task) -> LossTerm | None:
        if task.name != "personal":
            return None
        lam = self.settings.lam
        return lambda params, global_params: lam / 2 * l2_distance_squared(params, global_params)

    def extra_flops(self, task: Task, start: ModelState, steps: int) -> int:
        return 5 * start.num_params() * steps if task.name == "personal" else 0
