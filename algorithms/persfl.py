"""PersFL: FedAvg, each client's optimal teacher, then local distillation (paper 002).

Algorithm 1, two stages:

Stage 1 (rounds 0 .. fl_rounds-1, FedAvg): a selected client receives the
global model G_e, computes its cross-entropy on its own validation split
(task ``teacher-check``: a forward pass over ``val``) and keeps it as its
optimal teacher O_k if that loss is the lowest so far (eq. 2; the teacher
stays in client memory); then it trains and uploads as in FedAvg.

Stage 2 (round fl_rounds, local only, no upload): the client checks the final
global model the same way, then, for every (T, lambda) of the grid,
initializes A_k from O_k and trains ``distill_epochs`` epochs of

    (1 - lambda) CE(A_k(x), y) + lambda T^2 KL(softmax(O_k(x)/T) || softmax(A_k(x)/T))

(task ``distill:T..:lam..``), then measures A_k's accuracy on the validation
split (task ``check:...``). The candidate with the best validation accuracy
(ties: the earlier grid point) is the personalized model. Every task is local
compute, timed on the client's device.

Choices the paper leaves open, and the values taken:

* Grids: T in {1, 5, 9, ..., 25} and lambda in {0, 0.25, 0.5, 0.75, 1}: the
  per-user averages of Table 5 over five runs are multiples of 0.8 (T) and
  0.05 (lambda), which these grids produce.
* With partial participation a client can only check the global models it
  received; the paper has every client in every round.
* Before stage 2 the personalized model is the global model (FedAvg).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from pydantic import Field, field_validator

from mecsim.algorithms.base import (
    MAX_LR,
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
)
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.losses import (
    cross_entropy,
    detached,
    distillation_kl,
    inference_accuracy,
    inference_loss,
    prefixed,
    unprefixed,
)
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import Loss, Schedule, TrainResult

TEACHER = "teacher."


class PersFLSettings(AlgorithmSettings):
    """PersFL's keys: stage-1 rounds and the stage-2 search."""

    fl_rounds: int = Field(default=20, ge=1, description="E_G: FedAvg rounds before distillation")
    distill_epochs: int = Field(default=5, ge=1, description="E: epochs per (T, lambda) candidate")
    distill_lr: float | None = Field(
        default=None,
        gt=0,
        le=MAX_LR,
        description="stage 2's SGD learning rate (default: stage 1's lr); the candidates "
        "start from the teacher, so stage 1's rate fine-tunes it away",
    )
    distill_momentum: float | None = Field(
        default=None, ge=0, lt=1, description="stage 2's SGD momentum (default: stage 1's)"
    )
    temperatures: list[float] = Field(
        default=[1, 5, 9, 13, 17, 21, 25], min_length=1, description="grid of T"
    )
    imitations: list[float] = Field(
        default=[0, 0.25, 0.5, 0.75, 1], min_length=1, description="grid of lambda, in [0, 1]"
    )

    @field_validator("temperatures")
    @classmethod
    def _positive(cls, values: list[float]) -> list[float]:
        if any(not 0 < v <= 1000 for v in values):
            raise ValueError("every temperature must be in (0, 1000]")
        return values

    @field_validator("imitations")
    @classmethod
    def _unit(cls, values: list[float]) -> list[float]:
        if any(not 0 <= v <= 1 for v in values):
            raise ValueError("every imitation weight lambda must be in [0, 1]")
        return values


def persfl_loss(temperature: float, imitation: float, split: str = "train") -> Loss:
    """Algorithm 1, line 18: (1 - lambda) hard loss + lambda T^2 soft loss (teacher in consts)."""

    def loss(forward, params, batch, consts) -> torch.Tensor:
        data = batch[split]
        student = forward(data["x"])["logits"]
        teacher = unprefixed(TEACHER, consts)
        names = set(params)
        teacher_out = forward(
            data["x"],
            {k: v for k, v in teacher.items() if k in names},
            {k: v for k, v in teacher.items() if k not in names},
        )
        soft = distillation_kl(student, detached(teacher_out)["logits"], temperature)
        return (1 - imitation) * cross_entropy(student, data["y"]) + imitation * soft

    return loss


@ALGORITHMS.register("persfl", "PersFL: FedAvg, per-client optimal teacher, local distillation")
class PersFL(FedAvg):
    """FedAvg for ``fl_rounds`` rounds, then one round of local distillation."""

    Settings = PersFLSettings
    protocols = frozenset({"compute_and_wait", "deadline"})
    needs_validation = True

    def __init__(self, settings, models, label_counts=None, seed=0) -> None:
        s = settings
        self.check = Task("teacher-check", model="received", mode="infer", split="val")
        self.stage1 = (self.check, Task("local", model="local", uploads=True))
        self.grid = grid(s)
        stage2: list[Task] = [self.check]
        self.distills: dict[Task, tuple[float, float]] = {}
        """Each candidate's training task (A_k from O_k) and its (T, lambda)."""
        self.checks: set[Task] = set()
        """Each candidate's validation task: scores the candidate it trained."""
        for j, (t, lam) in enumerate(self.grid):
            name = f"T{t:g}:lam{lam:g}"
            distill = Task(f"distill:{name}", model=f"candidate{j}")
            check = Task(f"check:{name}", model=f"candidate{j}", mode="infer", split="val")
            self.distills[distill] = (t, lam)
            self.checks.add(check)
            stage2 += [distill, check]
        self.stage2 = tuple(stage2)
        super().__init__(settings, models, label_counts, seed)

    @classmethod
    def required_rounds(cls, settings: PersFLSettings) -> int:
        """protocol.rounds PersFL needs: E_G FedAvg rounds and one distillation round."""
        return settings.fl_rounds + 1

    def init_client_state(self, client: int) -> ClientState:
        return {"teacher": None, "teacher_loss": float("inf"), "teacher_round": -1}

    def round_tasks(self, round_: int) -> tuple[Task, ...]:
        return self.stage1 if round_ < self.settings.fl_rounds else self.stage2

    # --- client tasks ----------------------------------------------------------------
    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        if task in self.distills:  # A_k starts from the optimal teacher
            return state["teacher"].clone()
        if task in self.checks:  # its candidate's trained A_k (its distillation stored it)
            return state[task.model]
        return super().begin_task(task, state, payload, ctx)

    def schedule(self, task: Task) -> Schedule:
        schedule = super().schedule(task)
        if task in self.distills:  # E distillation epochs, with stage 2's own optimizer
            settings = self.settings
            return dataclasses.replace(
                schedule,
                epochs=settings.distill_epochs,
                steps=None,
                lr=schedule.lr if settings.distill_lr is None else settings.distill_lr,
                momentum=(
                    schedule.momentum
                    if settings.distill_momentum is None
                    else settings.distill_momentum
                ),
            )
        return schedule

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        if task in self.distills:
            return prefixed(TEACHER, state["teacher"])
        return {}

    def loss(self, task: Task) -> Loss:
        if task in self.distills:
            return persfl_loss(*self.distills[task])
        return super().loss(task)

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        if task is self.check:  # eq. (2): keep the received global model if it is the best
            loss, best = inference_loss(result.outputs), state["teacher_loss"]
            # no validation samples: every loss is infinite, keep the latest model
            if loss < best or state["teacher"] is None or (math.isinf(loss) and math.isinf(best)):
                state.update(teacher=result.state, teacher_loss=loss, teacher_round=ctx.round)
        elif task in self.checks:  # the trained candidate's validation accuracy
            accuracy = inference_accuracy(result.outputs)
            if accuracy > state.get("personal_acc", -1.0):
                state.update(personal=result.state, personal_acc=accuracy)
            state.pop(task.model, None)
        else:
            super().end_task(task, state, result, ctx)

    # --- evaluation ------------------------------------------------------------------
    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state.get("personal", server_state["global"])


def grid(settings: PersFLSettings) -> Sequence[tuple[float, float]]:
    """The (T, lambda) candidates in search order."""
    return [(t, lam) for t in settings.temperatures for lam in settings.imitations]
