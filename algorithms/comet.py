"""COMET: personalized FL by clustered codistillation over public-set logits.

Paper 000 (Sec. III, Algorithm 1, appendix B/D). Every client keeps its own
model w_k (any architecture): only soft decisions on the unlabeled public set
P travel, never weights.

Round t, server (Algorithm 1, lines 5-9):
    cluster the logits s_k uploaded in round t-1 (each |P| x N) by k-means into
    c clusters; send the centroids {c_i} (c x |P| x N floats) to the selected clients.
Round t, client k (lines 10-15; selected again, it resumes its own latest model):
    probe:     s_k = s(w_k, P), then s_bar_k = argmin_{c_i} ||c_i - s_k||^2       (eq. 4)
    codistill: tau SGD steps of eq. (2), each on b private and b' public samples:
               CE(w_k; private) + lambda / b' sum_{x in public batch} ||s_bar_k(x) - s(w_k, x)||^2
    logits:    upload s_k = s(w_k, P)                                  (|P| x N floats)

Choices the paper leaves open, and the values taken:

* s(w, x) is the softmax of the model's output ("soft-decisions (logits) over
  the N classes, a probability vector", Sec. III-B).
* Round 0 has no centroids yet (Algorithm 1 starts from logits of an
  initial set of clients): round 0 trains on the private loss alone
  (task ``local``) and uploads the first logits.
* k-means: k-means++ start, exactly ``kmeans_iterations`` Lloyd iterations,
  seeded from the algorithm's stream for the round (see
  :mod:`mecsim.algorithms.clustering`); with fewer uploads m than c, c = m.
  Its FLOPs are metered as the server's aggregation.
* With c = 1 the nearest centroid is the only one, so the probe (a forward
  pass over P) is skipped. The argmin of eq. (4) itself (3 c |P| N FLOPs)
  is not metered.
* A round whose predecessor received no upload has no centroids: the
  regularizer's weight is 0 that round (the public batch is still drawn, so
  FLOPs do not change with it).

Defaults are appendix B's CIFAR values: eta 0.001, b 64, tau 50, b' 128,
lambda 2 (SGD, no momentum, eq. (2)); scenarios choose their own.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from mecsim.algorithms.base import AlgorithmSettings, RoundContext, ServerState, Task, Upload
from mecsim.algorithms.clustering import kmeans, kmeans_flops
from mecsim.algorithms.logit_exchange import LogitExchange, soft_decisions
from mecsim.algorithms.losses import cross_entropy
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import Payload
from mecsim.learning.training import Loss, TrainResult


class CometSettings(AlgorithmSettings):
    """COMET's keys (appendix B defaults)."""

    steps: int | None = Field(default=50, ge=1, description="tau: local iterations per round")
    batch_size: int = Field(default=64, ge=1, description="b: private mini-batch size")
    lr: float = Field(default=0.001, gt=0, description="eta")
    clusters: int = Field(default=2, ge=1, le=10_000, description="c: k-means clusters")
    lam: float = Field(default=2.0, ge=0, description="lambda: weight of the codistillation term")
    public_batch_size: int = Field(default=128, ge=1, description="b': public mini-batch size")
    kmeans_iterations: int = Field(default=30, ge=1, le=10_000, description="Lloyd iterations")


def codistillation_loss(lam: float) -> Loss:
    """Eq. (1)/(2): CE on the private batch + lambda * mean ||s_bar(x) - s(w, x)||^2 on the
    public batch (``consts``: ``target`` = s_bar_k over P, ``weight`` = 1 or 0)."""

    def loss(forward, params, batch, consts) -> torch.Tensor:
        private, public = batch["train"], batch["public"]
        value = cross_entropy(forward(private["x"])["logits"], private["y"])
        probs = soft_decisions(forward(public["x"])["logits"])
        target = consts["target"][public["i"]]
        gap = ((target - probs) ** 2).sum(dim=-1).mean()
        return value + lam * consts["weight"] * gap

    return loss


@ALGORITHMS.register("comet", "COMET: clustered codistillation over public-set logits")
class Comet(LogitExchange):
    """Clients keep their own models and exchange soft decisions on the public set."""

    Settings = CometSettings
    probe = Task("probe", model="local", mode="infer", split="public")

    def __init__(self, settings, models, label_counts=None, seed=0) -> None:
        # eq. (2) trains on private and public batches at once: the private schedule (tau, b)
        public = (("public", settings.public_batch_size),)
        self.distill_task = Task("codistill", model="local", also=public)
        super().__init__(settings, models, label_counts, seed)

    def init_server_state(self) -> ServerState:
        return {"centroids": None}

    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        if round_ == 0:
            return (self.local_task, self.predict_task)
        probe = (self.probe,) if self.settings.clusters > 1 else ()
        return (*probe, self.distill_task, self.predict_task)

    # --- communication ---------------------------------------------------------------
    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload | None:
        centroids = server_state["centroids"]
        return None if centroids is None else {"centroids": centroids}

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        logits = self.stacked(uploads)  # [m, |P|, N]
        m, shape = len(uploads), logits.shape[1:]
        c = min(self.settings.clusters, m)
        if logits.is_meta:  # cost-only: shapes only
            return {"centroids": torch.empty((c, *shape), device="meta")}
        points = logits.reshape(m, -1).double().cpu().numpy()
        centroids, _ = kmeans(points, c, self.settings.kmeans_iterations, ctx.rng("kmeans"))
        tensor = torch.from_numpy(centroids).to(logits.dtype).reshape(c, *shape)
        return {"centroids": tensor.to(logits.device)}

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        if not uploads:
            return 0
        d = uploads[0].payload["predictions"].numel()
        s = self.settings
        return kmeans_flops(len(uploads), d, s.clusters, s.kmeans_iterations)

    # --- client tasks ----------------------------------------------------------------
    def end_task(self, task, state, result: TrainResult, ctx: RoundContext) -> None:
        if task == self.probe:
            state["probe"] = soft_decisions(result.outputs["logits"])
            return
        super().end_task(task, state, result, ctx)
        if task == self.distill_task:
            state.pop("probe", None)

    def received_target(self, payload: Payload | None, state) -> torch.Tensor | None:
        centroids = None if payload is None else payload.get("centroids")
        return None if centroids is None else nearest_centroid(centroids, state.get("probe"))

    def loss(self, task: Task) -> Loss:
        if task == self.distill_task:
            return codistillation_loss(self.settings.lam)
        return super().loss(task)


def nearest_centroid(centroids: torch.Tensor, probe: torch.Tensor | None) -> torch.Tensor:
    """Eq. (4): the centroid closest (squared L2 over all of P) to the client's own
    soft decisions ``probe``; the only centroid when there is one (or no probe)."""
    if probe is None or len(centroids) == 1 or centroids.is_meta:
        return centroids[0]
    distances = ((centroids - probe.unsqueeze(0)) ** 2).flatten(1).sum(dim=1)
    return centroids[int(np.argmin(distances.cpu().numpy()))]
