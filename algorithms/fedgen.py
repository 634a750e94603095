"""FedGen (Zhu, Hong and Zhou, ICML 2021): data-free knowledge distillation with a
server-side generator of the classifier head's input.

The server keeps the global model theta and a conditional generator
G_w(z, y) -> R^d, d the width of the classifier head's input. A round:

1. the server broadcasts theta, G_w and the global label distribution r-hat
   (from round 1 on, once G_w has been trained);
2. client k trains theta on (eq. 5)

       CE(f(x; theta), y) + a E_{y^ ~ r-hat, z} CE(g(G_w(z, y^); theta_head), y^)

   where g is theta's classifier head; it uploads theta_k and its label counts;
3. the server averages theta (FedAvg) and trains G_w on the ensemble of the
   uploaded heads (eq. 4): labels y ~ r-hat, ``sum_k alpha_k^y CE(g(G_w(z, y);
   theta_k_head), y)`` with alpha_k^y = c_k(y) / sum_j c_j(y), plus the code's
   diversity term ``exp(-mean(d_z * d_G))`` (weight eta), by Adam: task
   ``train-generator``, a server computation whose FLOPs are metered.

The generator is ``Linear(noise + C, hidden) -> ReLU -> Linear(hidden, d)``
(one-hot labels), as in the authors' code (``zhuangdizhu/FedGen``) without its
BatchNorm layer. A client's z and y^ for a step come from a per-round bank of
``bank_size`` draws, indexed by the step's sample indices, so every executor
draws the same ones.

Paper and code differ, and both readings are settings: the client weight a is 1
in eq. (5) (``teacher_weight``) and 10 in the code, decayed by 0.98 a round
(``weight_decay_per_round``); the code adds a latent term ``b KL(softmax(g(G(z,
y))) || f(x))`` on the real labels (``latent_weight``, 0 in the paper, 10 in the
code); the code draws z uniformly (``noise = "uniform"``) where the paper writes
a Gaussian (default) and samples the server's labels uniformly over the present
ones where the paper draws from r-hat (default). Generator defaults are the code's
MNIST run: noise 32, hidden 256, Adam at 3e-4 (weight decay 0.01, x0.98 a
round), 50 steps of 32 labels a round, eta = 1.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
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
from mecsim.algorithms.losses import cross_entropy, unprefixed
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.common.errors import ConfigError
from mecsim.learning.models.flops import FlopCount
from mecsim.learning.state import ModelState, Payload, TensorDict
from mecsim.learning.training import Loss, TrainResult

GEN = "gen."  # generator parameters, down
PRIOR = "gen.prior"  # r-hat, down
COUNTS = "gen.counts"  # a client's label counts, up
BANK_Z, BANK_Y, WEIGHTS = "bank.z", "bank.y", "bank.weights"  # client task constants
ADAM_FLOPS_PER_PARAMETER = 12
"""Per generator parameter and step: Adam's moments, bias corrections, weight decay, update."""


class FedGenSettings(AlgorithmSettings):
    noise_dim: int = Field(default=32, ge=1, description="dimension of the generator's noise z")
    generator_hidden: int = Field(default=256, ge=1, description="the generator's hidden width")
    generator_steps: int = Field(default=50, ge=1, description="server Adam steps a round")
    generator_batch_size: int = Field(
        default=32, ge=2, le=4096, description="labels drawn per generator step (code: 32)"
    )
    generator_lr: float = Field(default=3e-4, gt=0, description="the generator's Adam step")
    generator_weight_decay: float = Field(default=0.01, ge=0, description="Adam weight decay")
    generator_lr_decay: float = Field(default=0.98, gt=0, le=1, description="lr factor a round")
    diversity_weight: float = Field(default=1.0, ge=0, description="eta: diversity term")
    teacher_weight: float = Field(
        default=1.0, ge=0, description="a: the generated-sample term of eq. (5) (code: 10)"
    )
    latent_weight: float = Field(
        default=0.0, ge=0, description="b: the code's latent KL term on real labels (code: 10)"
    )
    weight_decay_per_round: float = Field(
        default=1.0, gt=0, le=1, description="a and b shrink by this a round (code: 0.98)"
    )
    noise: Literal["gaussian", "uniform"] = Field(
        default="gaussian", description="z's law: the paper's Gaussian or the code's uniform"
    )
    server_labels: Literal["prior", "uniform"] = Field(
        default="prior",
        description="the server's labels: from r-hat (paper) or uniform over present (code)",
    )
    bank_size: int = Field(default=1024, ge=1, description="(z, y^) draws a client holds a round")


def generate(gen: TensorDict, z: torch.Tensor, labels: torch.Tensor, classes: int) -> torch.Tensor:
    """G(z, y): the head-input features of one-hot ``labels`` and noise ``z``."""
    one_hot = F.one_hot(labels, classes).to(z.dtype)
    hidden = F.relu(F.linear(torch.cat([z, one_hot], dim=-1), gen["0.weight"], gen["0.bias"]))
    return F.linear(hidden, gen["2.weight"], gen["2.bias"])


def diversity(z: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """exp(-mean(d_z * d_G)): mean squared noise distances times mean absolute feature
    distances over all pairs (the authors' ``DiversityLoss``, l1 on the features)."""
    noise = (z.unsqueeze(0) - z.unsqueeze(1)).square().mean(-1)
    spread = (features.unsqueeze(0) - features.unsqueeze(1)).abs().mean(-1)
    return torch.exp(-(noise * spread).mean())


def fedgen_loss(split: str, head: tuple[str, str], classes: int) -> Loss:
    """Eq. (5) plus the code's latent term; plain cross-entropy before G is trained."""
    weight_key, bias_key = head

    def loss(forward, params, batch, consts):
        data = batch[split]
        logits = forward(data["x"])["logits"]
        total = cross_entropy(logits, data["y"])
        if WEIGHTS not in consts:  # round 0: no generator yet
            return total
        gen = unprefixed(GEN, consts)
        slot = data["i"] % consts[BANK_Y].shape[0]
        z, sampled = consts[BANK_Z][slot], consts[BANK_Y][slot]
        features = generate(gen, z, sampled, classes)
        generated = F.linear(features, params[weight_key], params[bias_key])
        teacher, latent = consts[WEIGHTS][0], consts[WEIGHTS][1]
        total = total + teacher * cross_entropy(generated, sampled)
        real = F.linear(generate(gen, z, data["y"], classes), params[weight_key], params[bias_key])
        target = F.softmax(real, dim=-1).detach()
        kl = (torch.xlogy(target, target) - target * F.log_softmax(logits, dim=-1)).sum(-1)
        return total + latent * kl.mean()

    return loss


@ALGORITHMS.register("fedgen", "FedGen: server generator of head inputs distils the client heads")
class FedGen(FedAvg):
    """FedAvg whose clients also fit generated head inputs of a server-trained generator."""

    Settings = FedGenSettings
    protocols = frozenset({"compute_and_wait", "deadline"})
    local = Task("local", model="local", uploads=True)
    train_generator = Task("train-generator", model="generator", mode="compute")
    tasks = (local,)

    def __init__(self, settings, models, label_counts=None, seed=0) -> None:
        arch = models.default
        weight, bias = (*arch.head.param_names, "")[:2]
        shape = arch.initial.params[weight].shape
        if len(shape) != 2 or not bias:
            raise ConfigError(
                "model.name",
                f"fedgen generates the classifier head's input, and {arch.name!r} ends in "
                "no linear layer with a bias; choose a model with a linear head (cnn-small, "
                "dnn-100, resnet18)",
            )
        self.head = (weight, bias)
        self.classes, self.width = int(shape[0]), int(shape[1])
        super().__init__(settings, models, label_counts, seed)

    # --- server -------------------------------------------------------------------------
    def init_server_state(self) -> ServerState:
        s, device = self.settings, self.device
        sizes = [(s.generator_hidden, s.noise_dim + self.classes), (self.width, s.generator_hidden)]
        generator: TensorDict = {}
        with torch.random.fork_rng(devices=[]):  # nn.Linear's default init, on the CPU
            torch.manual_seed(self.seed)
            for layer, (out, inp) in zip((0, 2), sizes, strict=True):
                module = torch.nn.Linear(inp, out)
                generator[f"{layer}.weight"] = module.weight.detach().to(device)
                generator[f"{layer}.bias"] = module.bias.detach().to(device)
        return {
            "global": self.initial.clone(),
            "generator": ModelState(generator, {}),
            "optimizer": None,
            "prior": None,
        }

    @property
    def device(self) -> torch.device:
        return next(iter(self.initial.params.values())).device

    def server_tasks(self, round_: int) -> tuple[Task, ...]:
        return (self.train_generator,)

    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload:
        payload = super().downlink(server_state, ctx)
        if server_state["prior"] is None:  # round 0: G is untrained, nothing more to send
            return payload
        gen = {GEN + k: v for k, v in server_state["generator"].params.items()}
        return {**payload, **gen, PRIOR: server_state["prior"]}

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        plain = [
            Upload(
                u.client,
                {k: v for k, v in u.payload.items() if k != COUNTS},
                u.num_samples,
                u.weight,
            )
            for u in uploads
        ]
        state = super().aggregate(server_state, plain, ctx)
        teachers = [
            (u.payload[self.head[0]], u.payload[self.head[1]], u.payload[COUNTS]) for u in uploads
        ]
        return {**state, "teachers": teachers}

    def compute(self, task: Task, state: ClientState, ctx: RoundContext) -> int:
        """Eq. (4): train G on the ensemble of this round's heads; return its FLOPs."""
        s = self.settings
        teachers = state.pop("teachers")
        gen_state: ModelState = state["generator"]
        meta = self.device.type == "meta"  # cost-only: count on zeros on the CPU, keep nothing
        device = torch.device("cpu") if meta else self.device
        names = list(gen_state.params)
        params = [
            (torch.zeros(v.shape) if meta else v.detach().clone()).to(device).requires_grad_(True)
            for v in gen_state.params.values()
        ]
        heads = [
            (torch.zeros(w.shape) if meta else w, torch.zeros(b.shape) if meta else b)
            for w, b, _ in teachers
        ]
        counts = torch.stack(
            [c.float() if not meta else torch.ones(c.shape) for _, _, c in teachers]
        )
        counts = counts.to(device)
        totals = counts.sum(0)
        prior = totals / totals.sum().clamp_min(1.0)
        alpha = counts / totals.clamp_min(1.0)  # alpha_k^y, [K, C]
        sampling = prior if s.server_labels == "prior" else (totals > 1).float()
        optimizer = torch.optim.Adam(
            params, lr=s.generator_lr, weight_decay=s.generator_weight_decay
        )
        if state["optimizer"] is not None and not meta:
            optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:
            group["lr"] = s.generator_lr * s.generator_lr_decay**ctx.round
        draws = ctx.generator("fedgen", "server")
        batch = s.generator_batch_size
        with FlopCount() as counter:
            for _ in range(s.generator_steps):
                labels = torch.multinomial(sampling.cpu(), batch, True, generator=draws)
                z = self.noise(batch, draws).to(device)
                labels = labels.to(device)
                gen = dict(zip(names, params, strict=True))
                features = generate(gen, z, labels, self.classes)
                loss = s.diversity_weight * diversity(z, features)
                for k, (weight, bias) in enumerate(heads):
                    logits = F.linear(features, weight.to(device), bias.to(device))
                    per_sample = -F.log_softmax(logits, -1).gather(-1, labels[:, None])[:, 0]
                    loss = loss + (per_sample * alpha[k, labels]).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        size = sum(v.numel() for v in params)
        flops = counter.total + ADAM_FLOPS_PER_PARAMETER * size * s.generator_steps
        if not meta:
            trained = {k: v.detach() for k, v in zip(names, params, strict=True)}
            state.update(
                generator=ModelState(trained, {}), optimizer=optimizer.state_dict(), prior=prior
            )
        elif state["prior"] is None:
            state["prior"] = torch.zeros(self.classes, device=self.device)
        return flops

    def noise(self, count: int, draws: torch.Generator) -> torch.Tensor:
        dim = self.settings.noise_dim
        if self.settings.noise == "uniform":
            return torch.rand(count, dim, generator=draws)
        return torch.randn(count, dim, generator=draws)

    # --- client ---------------------------------------------------------------------------
    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        if not payload or PRIOR not in payload:
            return {}
        s = self.settings
        prior = payload[PRIOR]
        device = prior.device
        draws = ctx.generator("fedgen", "bank")
        if prior.is_meta:
            sampled = torch.zeros(s.bank_size, dtype=torch.int64)
        else:
            sampled = torch.multinomial(
                prior.float().cpu() + 1e-12, s.bank_size, True, generator=draws
            )
        decay = s.weight_decay_per_round**ctx.round
        weights = torch.tensor(
            [max(1e-4, s.teacher_weight * decay) if s.teacher_weight else 0.0,
             max(1e-4, s.latent_weight * decay) if s.latent_weight else 0.0]
        )  # fmt: skip
        return {
            **{k: v for k, v in payload.items() if k.startswith(GEN) and k != PRIOR},
            BANK_Z: self.noise(s.bank_size, draws).to(device),
            BANK_Y: sampled.to(device),
            WEIGHTS: weights.to(device),
        }

    def loss(self, task: Task) -> Loss:
        return fedgen_loss(task.split, self.head, self.classes)

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        payload = super().upload(state, ctx)
        if self.label_counts is not None:
            counts = self.label_counts[ctx.client].to(torch.int64)
        else:
            counts = torch.zeros(self.classes, dtype=torch.int64)
        return {**payload, COUNTS: counts}

    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        if task == self.train_generator:  # on the server state
            return state["generator"]
        return super().begin_task(task, state, payload, ctx)

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        if task != self.train_generator:  # the generator task updated the state itself
            super().end_task(task, state, result, ctx)
