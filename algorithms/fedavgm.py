"""FedAvgM (Hsu et al. 2019, "Measuring the effects of non-identical data distribution"): server momentum.

Clients train as in FedAvg. With the averaged update
``Delta = w_G - sum_i (n_i / n) w_i`` the server keeps a velocity
``v <- beta v + Delta`` and steps ``w_G <- w_G - eta_s v`` (Sec. 3; beta = 0
and eta_s = 1 is FedAvg). Defaults are Hsu et al.'s update, ``w_G <- w_G - v``:
eta_s = 1 and beta = 0.9. A smaller eta_s (mecsim's earlier default was 0.1,
an effective step eta_s / (1 - beta) = 1) learns far more slowly: on the
quickstart at Dirichlet(0.1), 30 rounds, generic accuracy 0.947 against 0.708
with client momentum 0, and 0.950 against 0.454 by round 9 with momentum 0.9
(final 0.922 against 0.950) (``mecsim run scenarios/quickstart.toml --set
data.alpha=0.1 --set algorithm.name=fedavgm --set algorithm.server_lr=1``).
Integer buffers (BatchNorm's counter) take the average.
"""

from __future__ import annotations

import torch
from pydantic import Field

from mecsim.algorithms.aggregate import weighted_average
from mecsim.algorithms.base import AlgorithmSettings, RoundContext, ServerState, Upload
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState


class FedAvgMSettings(AlgorithmSettings):
    server_momentum: float = Field(default=0.9, ge=0, lt=1, description="beta: server momentum")
    server_lr: float = Field(
        default=1.0,
        gt=0,
        description="eta_s: server learning rate (1: Hsu et al.'s w <- w - v; the effective "
        "step is eta_s/(1-beta))",
    )


@ALGORITHMS.register("fedavgm", "FedAvgM: FedAvg with server momentum (Hsu et al. 2019)")
class FedAvgM(FedAvg):
    """FedAvg whose server applies the averaged update with momentum."""

    Settings = FedAvgMSettings
    protocols = frozenset({"compute_and_wait", "deadline", "wait_free"})

    def init_server_state(self) -> ServerState:
        floating = {k: v for k, v in self.initial.to_payload().items() if v.is_floating_point()}
        return {
            "global": self.initial.clone(),
            "velocity": {k: torch.zeros_like(v) for k, v in floating.items()},
        }

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        s = self.settings
        average = weighted_average(
            [u.payload for u in uploads], [u.aggregation_weight for u in uploads]
        )
        current = server_state["global"].to_payload()
        velocity = {
            k: s.server_momentum * v + (current[k] - average[k])
            for k, v in server_state["velocity"].items()
        }
        stepped = {**average, **{k: current[k] - s.server_lr * v for k, v in velocity.items()}}
        model: ModelState = server_state["global"].merge(stepped)
        return {**server_state, "global": model, "velocity": velocity}

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        # averaging, then per element: difference, momentum (2), step (2)
        return super().aggregation_flops(server_state, uploads) + 5 * self.initial.num_params()
