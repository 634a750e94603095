"""APFL (Deng, Kamani and Mahdavi, 2020): adaptive personalized federated learning.

Client i keeps a local version w_i of the global model, a personal model v_i
and a mixing weight alpha_i; its personalized model is the mixture

    v-bar_i = alpha_i v_i + (1 - alpha_i) w_i.                              (eq. 3)

Algorithm 1's local updates, each on the client's own loss f_i:

* ``w_i <- w_i - eta grad f_i(w_i)`` (task ``local``; w_i is uploaded and
  averaged as in FedAvg);
* ``v_i <- v_i - eta grad_v f_i(v-bar_i)`` = ``v_i - eta alpha_i grad f_i(v-bar_i)``
  (task ``personal``);
* adaptive alpha (Sec. 3.1): ``alpha_i <- alpha_i - eta_alpha <v_i - w_i, grad f_i(v-bar_i)>``,
  the derivative of f_i(v-bar_i) in alpha_i, clipped to [0, 1] (task ``mix``: one
  SGD step whose trained "model" is alpha_i alone).

The paper interleaves the three updates step by step; mecsim runs them as
three tasks in a round (w's epochs, then v's against the trained w, then one
alpha step), as its PFL+ algorithms do. The authors' code (``MLOPTPSU/FedTorch``)
updates alpha once per round too, at its first step, and mixes the two
models' *outputs* (alpha v(x) + (1 - alpha) w(x)) rather than their
parameters; mecsim follows the paper's parameter mixture (a mixture of
outputs is no single model, and the evaluator scores one model per client).
"""

from __future__ import annotations

import torch
from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, ClientState, RoundContext, ServerState, Task
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.losses import cross_entropy
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import Loss, Schedule, TrainResult

W = "w."  # constants: the client's local w_i
V = "v."  # constants: the personal v_i (the mix task)
ALPHA = "alpha"


class APFLSettings(AlgorithmSettings):
    alpha: float = Field(default=0.5, ge=0, le=1, description="alpha_i at start (eq. 3)")
    adaptive: bool = Field(default=True, description="learn alpha_i (Sec. 3.1); false: fixed")
    alpha_lr: float | None = Field(
        default=None, gt=0, description="eta_alpha: alpha's step size (default: lr)"
    )


def mixed(personal: TensorDict, local: TensorDict, alpha: torch.Tensor) -> TensorDict:
    """v-bar = alpha v + (1 - alpha) w, per parameter (eq. 3)."""
    return {k: alpha * v + (1 - alpha) * local[k] for k, v in personal.items()}


def personal_loss(split: str) -> Loss:
    """f_i(v-bar) as a function of v (constants: w and alpha)."""

    def loss(forward, params, batch, consts):
        local = {k[len(W) :]: v for k, v in consts.items() if k.startswith(W)}
        data = batch[split]
        logits = forward(data["x"], mixed(params, local, consts[ALPHA]))["logits"]
        return cross_entropy(logits, data["y"])

    return loss


def alpha_loss(split: str) -> Loss:
    """f_i(v-bar) as a function of alpha (constants: v, its buffers, and w)."""

    def loss(forward, params, batch, consts):
        local = {k[len(W) :]: v for k, v in consts.items() if k.startswith(W)}
        personal = {k[len(V) :]: v for k, v in consts.items() if k.startswith(V)}
        weights = {k: v for k, v in personal.items() if k in local}
        buffers = {k: v for k, v in personal.items() if k not in local}
        data = batch[split]
        logits = forward(data["x"], mixed(weights, local, params[ALPHA]), buffers)["logits"]
        return cross_entropy(logits, data["y"])

    return loss


def own_state(
    algorithm: APFL, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> ModelState:
    """The client's own v_i (or alpha_i)."""
    return state[task.model]


def mixture_constants(
    algorithm: APFL, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> TensorDict:
    """w_i and alpha_i, the fixed parts of v-bar_i when v_i trains."""
    local = {W + k: v for k, v in state["local"].params.items()}
    return {**local, ALPHA: state["alpha"].params[ALPHA]}


def alpha_constants(
    algorithm: APFL, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
) -> TensorDict:
    """w_i and v_i (with its buffers), the fixed parts of v-bar_i when alpha_i trains."""
    local = {W + k: v for k, v in state["local"].params.items()}
    return {**local, **{V + k: v for k, v in state["personal"].to_payload().items()}}


def one_alpha_step(algorithm: APFL, task: Task) -> Schedule:
    s = algorithm.settings
    return Schedule(1, 1, s.batch_size, s.alpha_lr or s.lr)


def clipped_alpha(
    algorithm: APFL, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
) -> None:
    """alpha_i, kept in [0, 1]."""
    state["alpha"] = ModelState({ALPHA: result.state.params[ALPHA].clamp(0.0, 1.0)}, {})


@ALGORITHMS.register("apfl", "APFL: personal model mixed with the local global one, adaptive alpha")
class APFL(FedAvg):
    """FedAvg on w plus a personal v and a learned mixing weight per client."""

    Settings = APFLSettings
    protocols = frozenset({"compute_and_wait", "deadline"})
    local = Task("local", model="local", uploads=True)  # w_i, from the received model
    personal = Task(  # v_i <- v_i - eta grad_v f_i(v-bar_i)
        "personal", model="personal", start=own_state, constants=mixture_constants,
        loss=lambda algorithm, task: personal_loss(task.split),
    )  # fmt: skip
    mix = Task(  # alpha_i <- alpha_i - eta_alpha <v_i - w_i, grad f_i(v-bar_i)>
        "mix", model="alpha", start=own_state, constants=alpha_constants, schedule=one_alpha_step,
        loss=lambda algorithm, task: alpha_loss(task.split),
        finish=clipped_alpha,
    )  # fmt: skip

    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        if self.settings.adaptive:
            return (self.local, self.personal, self.mix)
        return (self.local, self.personal)

    def init_client_state(self, client: int) -> ClientState:
        reference = next(iter(self.initial.params.values()))
        alpha = torch.full((), self.settings.alpha, device=reference.device)
        return {"personal": self.initial.clone(), "alpha": ModelState({ALPHA: alpha}, {})}

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        local = client_state.get("local", server_state["global"])
        personal: ModelState = client_state["personal"]
        alpha = client_state["alpha"].params[ALPHA]
        return ModelState(mixed(personal.params, local.params, alpha), personal.buffers)
