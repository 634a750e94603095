"""Ditto (Li et al., ICML 2021): personalization by a proximal pull toward the global model.

Generic model: trained as in FedAvg. Personal model (per client), eq. (2):
``min_v f_i(v) + lambda/2 ||v - w_G||^2`` with w_G the global model the
client received this round.
"""

from __future__ import annotations

from pydantic import Field

from mecsim.algorithms.base import ClientState, RoundContext, Task
from mecsim.algorithms.losses import cross_entropy_loss, proximal
from mecsim.algorithms.pflplus import PFLPlus, PFLPlusSettings
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import Loss


class DittoSettings(PFLPlusSettings):
    lam: float = Field(default=0.1, ge=0, description="lambda: pull of the personal model to w_G")


@ALGORITHMS.register("ditto", "Ditto: personal model pulled to w_G, lambda/2||w_p - w_G||^2 (PFL+)")
class Ditto(PFLPlus):
    """PFL+ with the personal loss CE + lambda/2 ||w_p - w_G||^2."""

    Settings = DittoSettings

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        if task.name != "personal" or not payload:
            return {}
        return {k: payload[k] for k in self.initial.params}

    def loss(self, task: Task) -> Loss:
        ce = cross_entropy_loss(task.split)
        if task.name != "personal":
            return ce
        lam = self.settings.lam

        def ditto_personal_loss(forward, params, batch, global_params):
            return ce(forward, params, batch, global_params) + lam / 2 * proximal(
                params, global_params
            )

        return ditto_personal_loss

    def extra_flops(self, task: Task, start: ModelState, steps: int) -> int:
        return 5 * start.num_params() * steps if task.name == "personal" else 0
