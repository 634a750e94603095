"""FedDF (Lin et al., NeurIPS 2020): ensemble distillation for robust model fusion.

Clients run FedAvg's local training from the global model and upload their
models. The server (Algorithm 1):

    x_0 = sum_k (n_k / n) x_k                                 (FedAvg initialization)
    for j = 1 .. N:  draw a batch d of the unlabeled public set P
        x_j = x_{j-1} - eta d/dx KL( softmax((1/|S|) sum_k f(x_k, d)) || softmax(f(x_{j-1}, d)) )

i.e. the averaged model is distilled on P toward the ensemble of the
received client models (AVGLOGITS: the mean of their logits). The
distillation is a server task (:meth:`server_tasks`): it runs on the server
device and every step's FLOPs - the student's forward and backward pass and
one forward pass per teacher - are metered like client work.

Choices the paper leaves open, and the values taken:

* N = ``distill_steps`` = 100 fixed steps (the paper stops early on a
  validation set, which would make the server's time depend on the data);
  SGD with ``distill_lr`` 0.01 and ``distill_momentum`` 0.9 (the paper uses
  Adam, which mecsim's trainer does not provide); batch ``public_batch_size``
  = 128; temperature 1.
* One architecture (the paper's prototype groups for mixed architectures
  are not built).
"""

from __future__ import annotations

from pydantic import Field

from mecsim.algorithms.base import (
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.losses import detached, distillation_kl, prefixed, unprefixed
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import Loss, Schedule, TrainResult


class FedDFSettings(AlgorithmSettings):
    public_batch_size: int = Field(default=128, ge=1, description="batch size on P (server)")
    distill_steps: int = Field(default=100, ge=1, description="N: server distillation steps")
    distill_lr: float = Field(default=0.01, gt=0, description="server distillation step size")
    distill_momentum: float = Field(
        default=0.9, ge=0, lt=1, description="server distillation SGD momentum"
    )
    temperature: float = Field(default=1.0, gt=0, description="T of the distillation KL")


def teacher_prefix(k: int) -> str:
    return f"teacher{k}."


def ensemble_distillation_loss(temperature: float, param_names: frozenset[str]) -> Loss:
    """KL from the mean logits of every ``teacher<k>.`` model in ``consts`` to the student,
    on the public batch."""

    def loss(forward, params, batch, consts):
        x = batch["public"]["x"]
        student = forward(x)["logits"]
        logits = []
        k = 0
        while teacher := unprefixed(teacher_prefix(k), consts):
            own = {n: v for n, v in teacher.items() if n in param_names}
            rest = {n: v for n, v in teacher.items() if n not in param_names}
            logits.append(detached(forward(x, own, rest))["logits"])
            k += 1
        ensemble = sum(logits) / len(logits)
        return distillation_kl(student, ensemble, temperature)

    return loss


@ALGORITHMS.register("feddf", "FedDF: FedAvg, then server-side ensemble distillation on P")
class FedDF(FedAvg):
    """FedAvg whose averaged model is distilled toward the client ensemble on the server."""

    Settings = FedDFSettings
    public_data = "unlabeled"
    protocols = frozenset({"compute_and_wait", "deadline", "wait_free"})
    distill = Task("ensemble-distill", model="global", split="public")

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        state = super().aggregate(server_state, uploads, ctx)
        teachers = [ModelState.from_payload(u.payload, self.initial) for u in uploads]
        return {**state, "teachers": teachers}

    def server_tasks(self, round_: int) -> tuple[Task, ...]:
        return (self.distill,)

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        if task == self.distill:  # x_0: the averaged model
            return state["global"]
        return super().begin_task(task, state, payload, ctx)

    def schedule(self, task: Task) -> Schedule:
        if task != self.distill:
            return super().schedule(task)
        s = self.settings
        return Schedule(1, s.distill_steps, s.public_batch_size, s.distill_lr, s.distill_momentum)

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        if task != self.distill:
            return super().task_constants(task, state, payload, ctx)
        out: TensorDict = {}
        for k, teacher in enumerate(state["teachers"]):
            out.update(prefixed(teacher_prefix(k), teacher))
        return out

    def loss(self, task: Task) -> Loss:
        if task == self.distill:
            names = frozenset(self.initial.params)
            return ensemble_distillation_loss(self.settings.temperature, names)
        return super().loss(task)

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        super().end_task(task, state, result, ctx)
        if task == self.distill:
            state.pop("teachers")
