"""FedFomo (Zhang, Sapra, Fidler, Yeung and Alvarez, ICLR 2021): first-order model optimization.

The server keeps every client's latest model theta_n (all start at the shared
initial model) and an affinity matrix P (N x N, zeros). Each round client i:

1. downloads M other clients' models, chosen epsilon-greedily on row P_i:
   with probability epsilon_t (= epsilon - t * decay, at least 0) M at random,
   otherwise the M with the largest affinity (Sec. 3.3);
2. scores its own previous model and each downloaded one on its validation split
   (tasks ``score:self`` and ``score:m<s>``, forward passes);
3. weighs each model by its first-order improvement (eq. 5)

       w_n = (L_i(theta_i^{t-1}) - L_i(theta_n)) / ||theta_n - theta_i^{t-1}||,

   keeps the positive ones, normalizes them to sum 1, and steps (eq. 6)
   ``theta_i = theta_i^{t-1} + sum_n w_n (theta_n - theta_i^{t-1})`` (task
   ``combine``; no positive weight: theta_i^{t-1} stays);
4. trains theta_i locally and uploads it with the ids and the eq. (5) weights
   of the models it downloaded; the server stores theta_i and adds the weights
   to P_i.

The personal model is the client's trained theta_i; there is no global model.
Every download and upload is metered: M models down, one model and 2M small
numbers up.

Paper and authors' code (``NVlabs/FedFomo``) differ in the norm of eq. (5): the
paper writes ||.|| (``distance = "l2"``, default), the code defaults to the L1
norm (``"l1"``). The defaults M = 4, epsilon = 0.3 and decay 0.05 are the
authors' README command for the 5-model setting (4 others and the client's own).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from mecsim.algorithms.base import (
    Algorithm,
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.algorithms.losses import inference_loss, unprefixed
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import TrainResult

IDS = "fomo.ids"  # down and up: the clients whose models were sent
WEIGHTS = "fomo.weights"  # up: eq. (5)'s w_n per downloaded model
COMBINE_FLOPS_PER_PARAMETER = 5
"""Per parameter and downloaded model: the difference, its norm (2) and the weighted add (2)."""


def model_prefix(s: int) -> str:
    return f"m{s}."


class FedFomoSettings(AlgorithmSettings):
    neighbors: int = Field(default=4, ge=1, description="M: models each client downloads")
    epsilon: float = Field(default=0.3, ge=0, le=1, description="epsilon: exploration")
    epsilon_decay: float = Field(default=0.05, ge=0, description="epsilon's decrease per round")
    distance: Literal["l2", "l1"] = Field(
        default="l2",
        description="the norm of eq. (5): 'l2' as the paper writes it, 'l1' the authors' code",
    )


def fomo_weights(
    own: TensorDict, own_loss: float, others: list[TensorDict], losses: list[float], norm: str
) -> torch.Tensor:
    """Eq. (5): the first-order improvement of each other model over the client's own
    (0 for a model at distance 0)."""
    weights = []
    for theta, loss in zip(others, losses, strict=True):
        difference = [theta[k] - v for k, v in own.items()]
        if norm == "l1":
            distance = float(sum(d.abs().sum() for d in difference))
        else:
            distance = float(sum(d.square().sum() for d in difference)) ** 0.5
        weights.append((own_loss - loss) / distance if distance > 0 else 0.0)
    return torch.tensor(weights, dtype=torch.float32)


@ALGORITHMS.register("fedfomo", "FedFomo: each client combines the models that lower its val loss")
class FedFomo(Algorithm):
    """Per-client downloads of the most helpful models, weighted by loss improvement."""

    Settings = FedFomoSettings
    broadcast = False
    needs_validation = True
    protocols = frozenset({"compute_and_wait", "deadline"})
    own = Task("score:self", model="local", mode="infer", split="val")
    combine = Task("combine", model="local", mode="compute")
    local = Task("local", model="local", uploads=True)

    def __init__(self, settings, models, label_counts=None, seed=0) -> None:
        self.count = min(settings.neighbors, max(len(models.client_arch) - 1, 1))
        self.scores = tuple(
            Task(f"score:m{s}", model=f"m{s}", mode="infer", split="val") for s in range(self.count)
        )
        super().__init__(settings, models, label_counts, seed)

    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        return (self.own, *self.scores, self.combine, self.local)

    def init_server_state(self) -> ServerState:
        n = len(self.models.client_arch)
        return {"models": [self.initial] * n, "affinity": torch.zeros(n, n)}

    def init_client_state(self, client: int) -> ClientState:
        return {"local": self.initial.clone()}

    # --- server -------------------------------------------------------------------------
    def chosen(self, affinity: torch.Tensor, ctx: RoundContext) -> list[int]:
        """Client ``ctx.client``'s M models: epsilon-greedy on its affinity row."""
        i = ctx.client
        assert i is not None
        others = [j for j in range(len(affinity)) if j != i]
        rng = ctx.rng("fomo")
        order = [others[k] for k in rng.permutation(len(others))]  # random tie-breaking
        epsilon = max(self.settings.epsilon - ctx.round * self.settings.epsilon_decay, 0.0)
        if rng.random() >= epsilon:  # exploit: the largest affinities first (stable sort)
            order.sort(key=lambda j: -float(affinity[i, j]))
        return order[: self.count]

    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload:
        ids = self.chosen(server_state["affinity"], ctx)
        payload: Payload = {IDS: torch.tensor(ids, dtype=torch.int64)}
        for s, j in enumerate(ids):
            model: ModelState = server_state["models"][j]
            payload.update({model_prefix(s) + k: v for k, v in model.to_payload().items()})
        return payload

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        models, affinity = list(server_state["models"]), server_state["affinity"].clone()
        for u in uploads:
            own = {k: v for k, v in u.payload.items() if k not in (IDS, WEIGHTS)}
            models[u.client] = ModelState.from_payload(own, self.initial)
            ids = u.payload[IDS].cpu()
            affinity[u.client, ids] += u.payload[WEIGHTS].cpu()
        return {**server_state, "models": models, "affinity": affinity}

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        return sum(len(u.payload[IDS]) for u in uploads)  # one add per weight

    # --- client ---------------------------------------------------------------------------
    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        if task in self.scores:
            assert payload is not None
            prefix = model_prefix(self.scores.index(task))
            return ModelState.from_payload(unprefixed(prefix, payload), self.initial)
        return state["local"]

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        if task == self.own:
            state["own_loss"] = inference_loss(result.outputs)
        elif task in self.scores:
            state.setdefault("losses", []).append(inference_loss(result.outputs))
        elif task != self.combine:  # combine updated state["local"] itself
            super().end_task(task, state, result, ctx)

    def compute(self, task: Task, state: ClientState, ctx: RoundContext) -> int:
        """Eqs. (5)-(6): weigh the downloaded models and step toward the helpful ones."""
        received = ctx.received
        assert received is not None
        own: ModelState = state["local"]
        losses, own_loss = state.pop("losses"), state.pop("own_loss")
        others = [
            ModelState.from_payload(unprefixed(model_prefix(s), received), self.initial)
            for s in range(len(losses))
        ]
        flops = COMBINE_FLOPS_PER_PARAMETER * own.num_params() * len(others)
        if own.params and next(iter(own.params.values())).is_meta:  # cost-only: no values
            state["weights"] = torch.zeros(len(others))
            return flops
        weights = fomo_weights(
            own.params, own_loss, [o.params for o in others], losses, self.settings.distance
        )
        state["weights"] = weights
        positive = weights.clamp_min(0.0)
        if float(positive.sum()) > 0:
            share = positive / positive.sum()
            stepped = {
                k: v + sum(float(w) * (o.params[k] - v) for w, o in zip(share, others, strict=True))
                for k, v in own.params.items()
            }
            state["local"] = ModelState(stepped, own.buffers)
        return flops

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        received = ctx.received
        assert received is not None
        return {
            **state["local"].to_payload(),
            IDS: received[IDS],
            WEIGHTS: state.pop("weights"),
        }

    def generic_model(self, server_state: ServerState) -> ModelState | None:
        return None

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state["local"]
