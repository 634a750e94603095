"""FedDyn (Acar et al., ICLR 2021): dynamic regularization (Algorithm 1).

Client i keeps the gradient state grad L_i(theta_i^{t-1}) (zeros at start)
and minimizes (line 5)

    L_i(theta) - <grad L_i(theta_i^{t-1}), theta> + alpha/2 ||theta - theta^{t-1}||^2

from the server model theta^{t-1}; then (line 6)
``grad L_i <- grad L_i - alpha (theta_i^t - theta^{t-1})``. The server keeps h
(lines 9-10): ``h <- h - alpha (1/m) sum_{i in P} (theta_i^t - theta^{t-1})``
with m all clients, and ``theta^t = (1/|P|) sum_{i in P} theta_i^t - h / alpha``.
Default alpha = 0.01 (the paper's grid is 0.1, 0.01, 0.001).

``client_alpha = "data_size"`` follows the authors' code (``alpaemreacar/FedDyn``):
client i uses alpha_i = alpha / w_i in its loss and its gradient state, with
w_i = n_i N / sum_j n_j its data share relative to the mean (1 for equal
clients); the server keeps alpha. ``"uniform"`` (default) is the paper's
Algorithm 1, one alpha everywhere.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import torch
from pydantic import Field

from mecsim.algorithms.aggregate import weighted_average
from mecsim.algorithms.base import (
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.losses import cross_entropy_loss, inner_product, proximal
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import Payload, TensorDict, zeros_like
from mecsim.learning.training import Loss, TrainResult

GRAD = "grad."
GLOBAL = "global."
ALPHA = "alpha"


class FedDynSettings(AlgorithmSettings):
    alpha: float = Field(default=0.01, gt=0, description="alpha: dynamic regularization weight")
    max_grad_norm: float = Field(
        default=10.0,
        ge=0,
        le=1e6,
        description="clip each local step's gradient to this L2 norm; 10 as the authors' "
        "code (the paper's Algorithm 1 has no clipping: 0)",
    )
    client_alpha: Literal["uniform", "data_size"] = Field(
        default="uniform",
        description="'uniform': every client uses alpha (the paper); 'data_size': client i "
        "uses alpha / w_i, w_i its data size over the mean (the authors' code)",
    )


@ALGORITHMS.register("feddyn", "FedDyn: dynamic regularizer with server state h (Acar et al. 2021)")
class FedDyn(FedAvg):
    """FedAvg with FedDyn's linear and quadratic client terms and server correction."""

    Settings = FedDynSettings
    protocols = frozenset({"compute_and_wait", "deadline"})

    def init_server_state(self) -> ServerState:
        return {"global": self.initial.clone(), "h": zeros_like(self.initial.params)}

    def init_client_state(self, client: int) -> ClientState:
        return {"grad": zeros_like(self.initial.params)}

    @cached_property
    def sizes(self) -> tuple[list[float], float]:
        """n_i of every client (its training labels counted), and their sum."""
        sizes = [float(c.sum()) for c in self.label_counts or ()]
        return sizes, sum(sizes)

    def client_alpha(self, client: int) -> float:
        """alpha_i: alpha, or alpha / w_i with w_i = n_i N / sum_j n_j (``data_size``)."""
        alpha = self.settings.alpha
        if self.settings.client_alpha == "uniform" or self.label_counts is None:
            return alpha
        sizes, total = self.sizes
        return alpha * total / (len(sizes) * sizes[client])

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        assert payload is not None and ctx.client is not None
        first = next(iter(self.initial.params.values()))
        alpha = self.client_alpha(ctx.client)
        return {
            **{GLOBAL + k: payload[k] for k in self.initial.params},
            **{GRAD + k: v for k, v in state["grad"].items()},
            ALPHA: torch.tensor(alpha, dtype=first.dtype, device=first.device),
        }

    def loss(self, task: Task) -> Loss:
        ce = cross_entropy_loss(task.split)
        names = list(self.initial.params)

        def feddyn_loss(forward, params, batch, consts):
            glob = {k: consts[GLOBAL + k] for k in names}
            grad = {k: consts[GRAD + k] for k in names}
            linear = inner_product(params, grad)
            alpha = consts[ALPHA]
            return ce(forward, params, batch, consts) - linear + alpha / 2 * proximal(params, glob)

        return feddyn_loss

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        super().end_task(task, state, result, ctx)
        received = ctx.received
        assert received is not None and ctx.client is not None
        alpha = self.client_alpha(ctx.client)
        state["grad"] = {
            k: g - alpha * (result.state.params[k] - received[k]) for k, g in state["grad"].items()
        }

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        alpha = self.settings.alpha
        m = len(self.models.client_arch)
        previous = server_state["global"].params
        mean = weighted_average([u.payload for u in uploads], [1.0] * len(uploads))
        drift = {k: sum(u.payload[k] - previous[k] for u in uploads) for k in previous}
        h = {k: v - alpha / m * drift[k] for k, v in server_state["h"].items()}
        theta = {**mean, **{k: mean[k] - h[k] / alpha for k in previous}}
        return {"global": server_state["global"].merge(theta), "h": h}
