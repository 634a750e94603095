"""FedBABU (Oh et al., ICLR 2022): body aggregation, body update; the head stays at its random init.

During federated training the head is frozen at its (shared, seeded)
initialization and only the body trains, is uploaded and averaged
(Algorithm 1). The personalized model of a client is the global model
fine-tuned on the client's data (Sec. 3, "fine-tuning"): the ``finetune``
task, tau_f epochs after the upload. The generic model is the global body with
the initial head.

What the fine-tuning trains, ``finetune_part``: ``"full"`` (default) trains the
whole model, as the paper's personalization does and as its authors' code
(``jhoon-oh/FedBABU``, ``analysis.ipynb``) does, one SGD learning rate for body
and head; ``"head"`` trains the head alone (an earlier mecsim reading, also what
several re-implementations do).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, RoundContext, ServerState, Task
from mecsim.algorithms.fedper import FedPer
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload
from mecsim.learning.training import Schedule


class FedBABUSettings(AlgorithmSettings):
    finetune_epochs: int = Field(default=5, ge=1, description="tau_f: fine-tuning epochs")
    finetune_steps: int | None = Field(default=None, ge=1, description="overrides finetune_epochs")
    finetune_part: Literal["full", "head"] = Field(
        default="full",
        description="what fine-tuning trains: the whole model (the paper and its authors' "
        "code) or the head alone",
    )


def body_schedule(algorithm: FedBABU, task: Task) -> Schedule:
    """Local training of the body; the head stays frozen at its initial value."""
    head = frozenset(algorithm.arch(None).head.param_names)
    trainable = frozenset(algorithm.initial.params) - head
    return dataclasses.replace(algorithm.schedule(task), trainable=trainable)


def finetune_schedule(algorithm: FedBABU, task: Task) -> Schedule:
    """tau_f epochs (or finetune_steps) of the whole model, or of the head alone."""
    s, head = algorithm.settings, frozenset(algorithm.arch(None).head.param_names)
    tuned = head if s.finetune_part == "head" else None  # None: every parameter
    return dataclasses.replace(
        algorithm.schedule(task),
        epochs=s.finetune_epochs,
        steps=s.finetune_steps or s.steps,
        trainable=tuned,
    )


@ALGORITHMS.register(
    "fedbabu", "FedBABU: head frozen at init, body shared; fine-tuned to personalize"
)
class FedBABU(FedPer):
    """Body-only federated training, head fine-tuning for personalization."""

    Settings = FedBABUSettings
    tasks = (
        Task("body", model="local", uploads=True, schedule=body_schedule),
        Task("finetune", model="personal", schedule=finetune_schedule),
    )

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        assert payload is not None, "FedBABU clients start from the global body"
        return self.initial.merge(payload)  # the global body under the initial head

    def generic_model(self, server_state: ServerState) -> ModelState:
        return server_state["global"]

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state.get("personal", server_state["global"])
