"""HypCluster (Mansour, Mohri, Ro and Suresh, 2020, Sec. 3): k hypotheses, each client
joins the one that fits it best.

The server keeps k models h_1..h_k (independently initialized). Each round:

1. the server broadcasts all k models;
2. each client scores every h_j on its training data (a forward pass, task
   ``score:h<j>``) and joins ``c_i = argmin_j L_i(h_j)`` (ties: the lowest j);
3. it trains h_{c_i} locally (FedAvg's local SGD) and uploads the model and c_i;
4. the server averages each hypothesis over the clients that chose it
   (weights n_i); a hypothesis no client chose stays as it was.

A client's personal model is the hypothesis it joined, as the server left it
after the round. There is no single generic model. COMET (Table V) runs
k = 2, 3, 5 and 6 and reports k = 6 in Table I: the default.
"""

from __future__ import annotations

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
from mecsim.algorithms.losses import inference_loss, unprefixed
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.common.rng import derive_seed
from mecsim.learning.state import ModelState, Payload
from mecsim.learning.training import TrainResult

CLUSTER = "cluster"  # upload: the hypothesis the client joined


def hypothesis_prefix(j: int) -> str:
    return f"h{j}."


class HypClusterSettings(AlgorithmSettings):
    clusters: int = Field(default=6, ge=1, le=64, description="k: hypotheses (COMET Table I: 6)")


@ALGORITHMS.register("hypcluster", "HypCluster: k hypotheses, each client trains its best fit")
class HypCluster(FedAvg):
    """k models on the server; each client picks the lowest-loss one and trains it."""

    Settings = HypClusterSettings
    protocols = frozenset({"compute_and_wait", "deadline"})
    local = Task("local", model="local", uploads=True)

    def __init__(self, settings, models, label_counts=None, seed=0) -> None:
        k = settings.clusters
        self.scores = tuple(
            Task(f"score:h{j}", model=f"h{j}", mode="infer", split="train") for j in range(k)
        )
        super().__init__(settings, models, label_counts, seed)

    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        return (*self.scores, self.local)

    def init_server_state(self) -> ServerState:
        arch = self.models.default
        hypotheses = [self.initial.clone()] + [
            arch.reinitialized(derive_seed(self.seed, "hypcluster", j))
            for j in range(1, self.settings.clusters)
        ]
        return {"hypotheses": hypotheses}

    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload:
        return {
            hypothesis_prefix(j) + k: v
            for j, h in enumerate(server_state["hypotheses"])
            for k, v in h.to_payload().items()
        }

    def hypothesis(self, payload: Payload, j: int) -> ModelState:
        return ModelState.from_payload(unprefixed(hypothesis_prefix(j), payload), self.initial)

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        assert payload is not None
        if task in self.scores:
            return self.hypothesis(payload, self.scores.index(task))
        losses = state.pop("losses")  # c_i = argmin_j L_i(h_j)
        state[CLUSTER] = min(range(len(losses)), key=lambda j: (losses[j], j))
        return self.hypothesis(payload, state[CLUSTER])

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        if task in self.scores:
            losses = state.setdefault("losses", [0.0] * len(self.scores))
            losses[self.scores.index(task)] = inference_loss(result.outputs)
            return
        super().end_task(task, state, result, ctx)

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        cluster = torch.tensor([state[CLUSTER]], dtype=torch.int64)
        return {**state["local"].to_payload(), CLUSTER: cluster}

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        hypotheses = list(server_state["hypotheses"])
        for j in range(len(hypotheses)):
            members = [u for u in uploads if int(u.payload[CLUSTER][0]) == j]
            if members:
                models = [{k: v for k, v in u.payload.items() if k != CLUSTER} for u in members]
                average = weighted_average(models, [u.aggregation_weight for u in members])
                hypotheses[j] = hypotheses[j].merge(average)
        return {**server_state, "hypotheses": hypotheses}

    def generic_model(self, server_state: ServerState) -> ModelState | None:
        return None

    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return server_state["hypotheses"][client_state.get(CLUSTER, 0)]
