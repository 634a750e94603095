"""What every algorithm that exchanges predictions on the public split shares.

COMET, FedMD, DS-FL and KT-pFL never move weights: every client keeps its
own model (any architecture, key ``local``), runs it over the public split P
(an inference task, forward FLOPs only) and uploads its predictions, a
|P| x N tensor; the server turns the uploads into a target (a consensus, an
entropy-reduced average, clusters, personalized mixtures) and sends it down;
a client then trains toward its target on P.

A round of the default flow, for a client (the target comes from the uploads
of the previous round, so round 0 has none):

    distill  train on P toward the received target     (not in round 0)
    local    train on the private split (cross-entropy)
    logits   predictions on P, uploaded                 (|P| x N floats)

A subclass sets the three tasks (class attributes), :meth:`prediction`
(what a client makes of its logits), :meth:`target_loss` (how far a
student's logits on a public batch are from the target) and the server side
(:meth:`aggregate`, :meth:`downlink`, :meth:`aggregation_flops`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import (
    Algorithm,
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import Loss, Schedule, TrainResult

TargetLoss = Callable[[Tensor, Tensor], Tensor]
"""``target_loss(student_logits, target_rows) -> scalar``: distance to the server's target."""


class LogitExchangeSettings(AlgorithmSettings):
    """Keys of the distillation step on the public split (local training uses the shared keys)."""

    public_batch_size: int = Field(default=128, ge=1, description="mini-batch size on P")
    distill_epochs: int = Field(default=1, ge=1, description="passes over P per distillation")
    distill_steps: int | None = Field(
        default=None, ge=1, description="distillation SGD steps; overrides distill_epochs"
    )
    distill_lr: float | None = Field(
        default=None, gt=0, description="learning rate on P (None: the local lr)"
    )


def soft_decisions(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Class probabilities softmax(logits / T)."""
    return F.softmax(logits / temperature, dim=-1)


class LogitExchange(Algorithm):
    """Clients keep their own models and exchange predictions on the public split."""

    Settings = LogitExchangeSettings
    heterogeneous = True
    public_data = "unlabeled"
    # the server's work is a function of the whole round's uploads: no asynchronous mix
    protocols = frozenset({"compute_and_wait", "deadline", "wait_free"})
    distill_task = Task("distill", model="local", split="public")
    local_task = Task("local", model="local")
    predict_task = Task("logits", model="local", mode="infer", split="public", uploads=True)

    # --- state -----------------------------------------------------------------------
    def init_server_state(self) -> ServerState:
        return {"target": None}

    def init_client_state(self, client: int) -> ClientState:
        return {"local": self.arch(client).initial.clone()}

    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        if round_ == 0:
            return (self.local_task, self.predict_task)
        return (self.distill_task, self.local_task, self.predict_task)

    def schedule(self, task: Task) -> Schedule:
        """Distillation on P uses the distillation keys; everything else the local ones."""
        if task != self.distill_task or task.split != "public":
            return super().schedule(task)
        s = self.settings
        lr = s.lr if s.distill_lr is None else s.distill_lr
        return Schedule(
            s.distill_epochs, s.distill_steps, s.public_batch_size, lr, s.momentum, s.weight_decay
        )

    # --- communication ---------------------------------------------------------------
    def prediction(self, logits: Tensor) -> Tensor:
        """What a client uploads from its logits on P. Default: the softmax."""
        return soft_decisions(logits)

    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload | None:
        target = server_state["target"]
        return None if target is None else {"target": target}

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        return {"predictions": state.pop("predictions")}

    @staticmethod
    def stacked(uploads: list[Upload]) -> Tensor:
        """The uploaded predictions as one [m, |P|, N] tensor."""
        return torch.stack([u.payload["predictions"] for u in uploads])

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        """Default: one add per uploaded element and one scale per target element."""
        if not uploads:
            return 0
        d = uploads[0].payload["predictions"].numel()
        return len(uploads) * d + d

    # --- client tasks ----------------------------------------------------------------
    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        if task == self.predict_task:
            state["predictions"] = self.prediction(result.outputs["logits"])
        else:
            super().end_task(task, state, result, ctx)

    def received_target(self, payload: Payload | None, state: ClientState) -> Tensor | None:
        """The client's target over P from what it received (None: nothing arrived)."""
        return None if payload is None else payload.get("target")

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        if task != self.distill_task:
            return {}
        target = self.received_target(payload, state)
        if target is None:  # nothing reached the server last round: a zero-weight target
            model: ModelState = state["local"]
            classes = model.params[self.arch(ctx.client).head.param_names[0]].shape[0]
            zeros = torch.zeros(ctx.num_samples["public"], classes, device=model.device)
            return {"target": zeros, "weight": torch.tensor(0.0, device=model.device)}
        return {"target": target, "weight": torch.tensor(1.0, device=target.device)}

    def target_loss(self) -> TargetLoss:
        """Distance of a student's public-batch logits to its target rows (required)."""
        raise NotImplementedError(self)

    def loss(self, task: Task) -> Loss:
        if task == self.distill_task:
            return public_target_loss(self.target_loss(), task.split)
        return super().loss(task)

    # --- evaluation ------------------------------------------------------------------
    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state["local"]


def public_target_loss(distance: TargetLoss, split: str = "public") -> Loss:
    """``weight * distance(logits on the batch of split, target rows of the batch)``;
    ``consts``: ``target`` (one row per sample of the split) and ``weight`` (0 or 1)."""

    def loss(forward, params, batch, consts) -> Tensor:
        data = batch[split]
        logits = forward(data["x"])["logits"]
        return consts["weight"] * distance(logits, consts["target"][data["i"]])

    return loss
