"""SCAFFOLD (Karimireddy et al., ICML 2020): control variates correct client drift (Algorithm 1).

The server holds the global model x and a control variate c; client i holds
c_i (zeros at start). Both directions carry a model and a control variate:

* down: (x, c);
* local steps (line 10): ``y <- y - eta_l (g_i(y) - c_i + c)``: the gradient
  step through the optimizer, the correction ``c - c_i`` applied after it,
  outside the momentum buffer (:data:`~mecsim.learning.training.STEP_CORRECTION`, as
  the authors' and NIID-Bench's code do). As a loss term ``<y, c - c_i>`` the
  constant correction went through momentum 0.9 and moved the model 3.6x
  (K = 8 steps) to 7x (K = 28) further than option II's ``(x - y)/(K eta_l)``
  assumes, and the control variates grew geometrically until training
  diverged;
* option II (line 12): ``c_i+ = c_i - c + (x - y) / (K eta_l)`` with K the
  local steps taken. Under client momentum beta, K heavy-ball steps on a constant
  gradient g move the model ``eta_l S_K g`` with ``S_K = sum_k (1 - beta^k)/(1 - beta)``
  (1.45 K at K = 2, 8.2 K at K = 50 for beta = 0.9), so ``(x - y)/(K eta_l)`` reads
  each client's gradient at its own scale, c - c_i stops cancelling, and on the
  quickstart (lr 0.05, beta 0.9) training diverged in round 16. The default
  ``control_steps = "momentum"`` divides the gradient part of x - y by ``S_K eta_l``
  (and the correction part, which moved outside the buffer, by ``K eta_l``):
  ``c_i+ = (x - y - K eta_l (c - c_i)) / (S_K eta_l)``, option II itself at beta = 0.
  ``"plain"`` is option II as written;
* up: (Delta y = y - x, Delta c = c_i+ - c_i);
* server (lines 16-17): ``x <- x + eta_g mean(Delta y)``,
  ``c <- c + (|S| / N) mean(Delta c)``, means uniform over the senders.

The paper and the public implementations (NIID-Bench, FL-bench) use plain SGD,
where both readings agree. Integer buffers (BatchNorm's
counter) are averaged as values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mecsim.algorithms.aggregate import payload_difference, weighted_average
from mecsim.algorithms.base import (
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload, TensorDict, zeros_like
from mecsim.learning.training import STEP_CORRECTION, TrainResult

C = "c."  # payload prefix of control variates
DY = "dy."  # payload prefix of model deltas


class ScaffoldSettings(AlgorithmSettings):
    server_lr: float = Field(default=1.0, gt=0, description="eta_g: global step size")
    control_steps: Literal["momentum", "plain"] = Field(
        default="momentum",
        description="option II's divisor for the gradient part of x - y: 'momentum' counts "
        "each SGD step as sum_k (1 - beta^k)/(1 - beta) steps (the same at momentum 0); "
        "'plain': K eta_l as written, which over-estimates c_i by up to 1/(1 - beta)",
    )


def effective_steps(steps: int, momentum: float) -> float:
    """S_K = sum_{k=1..K} (1 - beta^k)/(1 - beta): how far K heavy-ball steps with
    momentum beta move under a constant gradient, in plain-SGD steps (K at beta = 0)."""
    if momentum == 0.0:
        return float(steps)
    return (steps - momentum * (1.0 - momentum**steps) / (1.0 - momentum)) / (1.0 - momentum)


@ALGORITHMS.register("scaffold", "SCAFFOLD: control variates, option II (Karimireddy et al. 2020)")
class Scaffold(FedAvg):
    """FedAvg with client and server control variates."""

    Settings = ScaffoldSettings
    protocols = frozenset({"compute_and_wait", "deadline"})

    def init_server_state(self) -> ServerState:
        return {"global": self.initial.clone(), "control": zeros_like(self.initial.params)}

    def init_client_state(self, client: int) -> ClientState:
        return {"control": zeros_like(self.initial.params)}

    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload:
        control = {C + k: v for k, v in server_state["control"].items()}
        return {**server_state["global"].to_payload(), **control}

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        assert payload is not None
        return {
            STEP_CORRECTION + k: payload[C + k] - state["control"][k] for k in self.initial.params
        }

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        received = ctx.received
        assert received is not None
        x = ModelState.from_payload(received, self.initial)
        y = result.state
        schedule, steps = self.schedule(task), max(result.steps, 1)
        if self.settings.control_steps == "momentum":
            # x - y = eta_l S_K g_avg + K eta_l (c - c_i): the correction moved the model
            # outside the momentum buffer, so only the gradient part is divided by S_K
            scale = 1.0 / (effective_steps(steps, schedule.momentum) * schedule.lr)
            ratio = steps * schedule.lr * scale
        else:
            scale, ratio = 1.0 / (steps * schedule.lr), 1.0
        control = {
            k: (c - received[C + k]) * ratio + scale * (x.params[k] - y.params[k])
            for k, c in state["control"].items()
        }
        delta_y = payload_difference(y.to_payload(), x.to_payload())
        integer = {k: v for k, v in y.to_payload().items() if not v.is_floating_point()}
        state["upload"] = {
            **{DY + k: v for k, v in delta_y.items()},
            **integer,
            **{C + k: control[k] - state["control"][k] for k in control},
        }
        state["control"] = control

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        return state.pop("upload")

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        mean = weighted_average([u.payload for u in uploads], [1.0] * len(uploads))
        x = server_state["global"].to_payload()
        stepped = {
            k: (x[k] + self.settings.server_lr * mean[DY + k]) if DY + k in mean else mean.get(k, v)
            for k, v in x.items()
        }
        fraction = len(uploads) / len(self.models.client_arch)
        control = {k: c + fraction * mean[C + k] for k, c in server_state["control"].items()}
        return {"global": server_state["global"].merge(stepped), "control": control}
