"""FedRep (Collins et al., ICML 2021): shared representation, local heads (Algorithm 1).

Each round a selected client, starting from the global body phi and its own
head h_i:

1. ``head`` - tau_h epochs on the head, body frozen (line 6);
2. ``body`` - tau epochs on the body, head frozen (line 7); the body is uploaded.

The server averages the bodies (line 9). Only the body moves; the
personalized model is the client's body + head.
"""

from __future__ import annotations

import dataclasses

from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, RoundContext, Task
from mecsim.algorithms.fedper import FedPer
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload
from mecsim.learning.training import Schedule


class FedRepSettings(AlgorithmSettings):
    head_epochs: int = Field(default=10, ge=1, description="tau_h: head epochs before the body")
    head_steps: int | None = Field(default=None, ge=1, description="overrides head_epochs")


def head_schedule(algorithm: FedRep, task: Task) -> Schedule:
    """tau_h epochs (or head_steps) training the head alone."""
    s, head = algorithm.settings, algorithm.arch(None).head.param_names
    base = dataclasses.replace(
        algorithm.schedule(task), epochs=s.head_epochs, steps=s.head_steps or s.steps
    )
    return dataclasses.replace(base, trainable=frozenset(head))


def body_schedule(algorithm: FedRep, task: Task) -> Schedule:
    """The local epochs, training every layer but the head."""
    body = {n for layer in algorithm.arch(None).layers[:-1] for n in layer.param_names}
    return dataclasses.replace(algorithm.schedule(task), trainable=frozenset(body))


def own_model(
    algorithm: FedRep, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> ModelState:
    """The client's model as the head task left it."""
    return state["local"]


@ALGORITHMS.register("fedrep", "FedRep: head epochs then body epochs; only the body moves")
class FedRep(FedPer):
    """Alternating head and body updates; the body is shared."""

    Settings = FedRepSettings
    tasks = (
        Task("head", model="local", schedule=head_schedule),  # the new body, own head
        Task("body", model="local", uploads=True, schedule=body_schedule, start=own_model),
    )
