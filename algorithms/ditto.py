"""Ditto (Li et al., ICML 2021): personalization by a proximal pull toward the global model.

Generic model: trained as in FedAvg. Personal model (per client), eq. (2):
``min_v f_i(v) + lambda/2 ||v - w_G||^2`` with w_G the global model the
client received this round.
"""

from __future__ import annotations

import dataclasses

from pydantic import Field

from mecsim.algorithms.base import ClientState, RoundContext, Task
from mecsim.algorithms.losses import proximal_cross_entropy
from mecsim.algorithms.pflplus import PFLPlus, PFLPlusSettings
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import Payload, TensorDict
from mecsim.learning.training import Loss


class DittoSettings(PFLPlusSettings):
    lam: float = Field(default=0.1, ge=0, description="lambda: pull of the personal model to w_G")


def received_global(
    algorithm: Ditto, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> TensorDict:
    """w_G: the global model the client received this round (the loss's constants)."""
    return {k: payload[k] for k in algorithm.initial.params} if payload else {}


def personal_loss(algorithm: Ditto, task: Task) -> Loss:
    """Eq. (2): CE + lambda/2 ||v - w_G||^2."""
    return proximal_cross_entropy(task.split, algorithm.settings.lam)


@ALGORITHMS.register("ditto", "Ditto: personal model pulled to w_G, lambda/2||w_p - w_G||^2 (PFL+)")
class Ditto(PFLPlus):
    """PFL+ whose personal task minimizes CE + lambda/2 ||w_p - w_G||^2."""

    Settings = DittoSettings
    personal = dataclasses.replace(PFLPlus.personal, loss=personal_loss, constants=received_global)
    tasks = (PFLPlus.generic, personal)
