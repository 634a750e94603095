"""pFedLA (Ma et al., CVPR 2022): layer-wise personalized aggregation from hypernetworks.

The server keeps every client's latest model theta_j and, per client i, a
hypernetwork HN_i with an embedding v_i that outputs layer-wise aggregation
weights alpha_i = HN_i(v_i) (L x N, a softmax over clients per layer). Client
i receives its personalized aggregate

    theta-bar^l_i = sum_j alpha^l_ij theta^l_j

trains it on its data (cross-entropy, E epochs) and uploads theta_i. The
server takes Delta_i = theta_i - theta-bar_i as the descent direction of the
client's loss at theta-bar_i and updates HN_i and v_i by the chain rule:

    phi_i <- phi_i + eta_hn (d theta-bar_i / d phi_i)^T Delta_i

and stores theta_i. Before the next round's downloads (a timed server job)
it computes the selected clients' alpha and aggregates. An upload that
arrives after its round's aggregates are gone (a late ``deadline`` carry)
is stored without a hypernetwork step.

The storage of the N models, the per-client downloads of an aggregate's
parameters (a client keeps its own buffers) and the personalized model (the
client's trained model) are :mod:`mecsim.algorithms.layerwise`'s, as for
KAPC: the layer-wise weight cube is alpha instead of a learned relationship
cube.

Choices the paper leaves open, and the values taken:

* HN_i: embedding (``embedding_dim`` = 32) -> MLP with two hidden layers of
  ``hidden_dim`` = 32 (ReLU) -> one linear head of L x N weights, softmax over
  clients per layer; heads start at zero (uniform alpha: FedAvg's average).
* One Adam step of ``hn_lr`` = 0.005 per upload (the authors' optimizer and
  rate); each hypernetwork keeps its own moments.
* E = 5, lr 0.01 (KAPC's settings for every baseline).

Server FLOPs (m uploads, N clients, P parameters, F = 2 (e h + h^2 + h L N)
the multiply-adds of one hypernetwork pass, H its parameters), in closed
form: aggregating m uploads, m P (Delta) + 2 m N P (the inner products
<theta^l_j, Delta^l_i>) + 3 m F + 10 m H (forward, backward and the Adam
update of m hypernetworks); preparing m selected clients' downloads, m F +
2 m N P (their alpha and aggregates).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import (
    MAX_LR,
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.algorithms.layerwise import LayerwiseMixing
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.common.rng import numpy_rng
from mecsim.learning.state import ModelState, Payload, TensorDict


class PFedLASettings(AlgorithmSettings):
    epochs: int = Field(default=5, ge=1, description="local epochs per round")
    lr: float = Field(default=0.01, gt=0, le=MAX_LR, description="local SGD learning rate")
    embedding_dim: int = Field(
        default=32, ge=1, le=4096, description="size of each client's embedding in the hypernetwork"
    )
    hidden_dim: int = Field(
        default=32, ge=1, le=4096, description="hidden width of the hypernetwork"
    )
    hn_lr: float = Field(default=0.005, gt=0, description="hypernetwork step size")


def init_hypernetworks(n: int, layers: int, s: PFedLASettings, seed: int) -> TensorDict:
    """N hypernetworks, stacked on the first dimension; zero heads (uniform alpha)."""
    generator = torch.Generator().manual_seed(seed)
    e, h = s.embedding_dim, s.hidden_dim

    def uniform(*shape: int, fan_in: int) -> Tensor:
        bound = fan_in**-0.5
        return (torch.rand(n, *shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound

    return {
        "embedding": torch.randn(n, e, generator=generator, dtype=torch.float64),
        "w1": uniform(e, h, fan_in=e),
        "b1": uniform(h, fan_in=e),
        "w2": uniform(h, h, fan_in=h),
        "b2": uniform(h, fan_in=h),
        "head": torch.zeros(n, h, layers * n, dtype=torch.float64),
        "head_bias": torch.zeros(n, layers * n, dtype=torch.float64),
    }


def aggregation_weights(nets: TensorDict, layers: int) -> Tensor:
    """alpha [n, L, N] of the n stacked hypernetworks ``nets``."""
    hidden = F.relu(torch.einsum("ne,neh->nh", nets["embedding"], nets["w1"]) + nets["b1"])
    hidden = F.relu(torch.einsum("nh,nhk->nk", hidden, nets["w2"]) + nets["b2"])
    out = torch.einsum("nh,nhk->nk", hidden, nets["head"]) + nets["head_bias"]
    return torch.softmax(out.view(out.shape[0], layers, -1), dim=-1)


ADAM = (0.9, 0.999, 1e-8)
"""Adam's beta1, beta2 and epsilon (PyTorch's defaults)."""


def hypernetwork_step(
    nets: TensorDict, moments: TensorDict, steps: Tensor, directions: Tensor, layers: int, lr: float
) -> tuple[TensorDict, TensorDict, Tensor]:
    """One Adam step on n hypernetworks; returns (nets, moments, steps).

    ``directions`` [n, L, N] holds <theta^l_j, Delta^l_i>, the derivative of
    <theta-bar_i, Delta_i> in alpha^l_ij: the step ascends it (descends the
    client's loss). ``moments`` holds Adam's ``m.<key>`` and ``v.<key>``,
    ``steps`` each hypernetwork's step count.
    """
    beta1, beta2, eps = ADAM
    leaves = {k: v.detach().requires_grad_(True) for k, v in nets.items()}
    surrogate = (aggregation_weights(leaves, layers) * directions).sum()
    grads = torch.autograd.grad(surrogate, list(leaves.values()))
    steps = steps + 1
    out, new_moments = {}, {}
    for (k, leaf), grad in zip(leaves.items(), grads, strict=True):
        ascent = -grad
        m = beta1 * moments[f"m.{k}"] + (1 - beta1) * ascent
        v = beta2 * moments[f"v.{k}"] + (1 - beta2) * ascent**2
        shape = (-1,) + (1,) * (leaf.dim() - 1)
        m_hat = m / (1 - beta1 ** steps.view(shape))
        v_hat = v / (1 - beta2 ** steps.view(shape))
        out[k] = (leaf - lr * m_hat / (v_hat.sqrt() + eps)).detach()
        new_moments[f"m.{k}"], new_moments[f"v.{k}"] = m, v
    return out, new_moments, steps


@ALGORITHMS.register("pfedla", "pFedLA: per-client layer-wise aggregation from hypernetworks")
class PFedLA(LayerwiseMixing):
    """Clients train their layer-wise personalized aggregate; hypernetworks learn the weights."""

    Settings = PFedLASettings
    protocols = frozenset({"compute_and_wait", "deadline"})

    def init_server_state(self) -> ServerState:
        s, n, layers = self.settings, self.num_clients, len(self.layers)
        seed = int(numpy_rng(self.seed, "algorithm", "hypernetworks").integers(2**62))
        nets = init_hypernetworks(n, layers, s, seed)
        moments = {f"{p}.{k}": torch.zeros_like(v) for k, v in nets.items() for p in "mv"}
        return {
            **self.initial_server_state(aggregation_weights(nets, layers).detach()),
            "hypernetworks": nets,
            "adam": moments,
            "adam_steps": torch.zeros(n, dtype=torch.float64),
        }

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        models, server, nets = (server_state[k] for k in ("models", "server", "hypernetworks"))
        moments, steps = server_state["adam"], server_state["adam_steps"]
        layers = len(self.layers)
        stepping = [u for u in uploads if u.client in server]  # theta-bar_i still known
        if stepping and not next(iter(models.values())).is_meta:
            rows = torch.tensor([u.client for u in stepping])
            directions = torch.zeros(len(stepping), layers, self.num_clients, dtype=torch.float64)
            for index, layer in enumerate(self.layers):
                for k in layer.param_names:
                    delta = torch.stack([u.payload[k] - server[u.client][k] for u in stepping])
                    flat = models[k].reshape(self.num_clients, -1).double()
                    directions[:, index] += delta.reshape(len(stepping), -1).double() @ flat.T
            stepped, moved, counted = hypernetwork_step(
                {k: v[rows] for k, v in nets.items()},
                {k: v[rows] for k, v in moments.items()},
                steps[rows],
                directions,
                layers,
                self.settings.hn_lr,
            )
            nets = {k: v.clone().index_put_((rows,), stepped[k]) for k, v in nets.items()}
            moments = {k: v.clone().index_put_((rows,), moved[k]) for k, v in moments.items()}
            steps = steps.clone().index_put_((rows,), counted)
        state = {**server_state, "hypernetworks": nets, "adam": moments, "adam_steps": steps}
        return super().aggregate(state, uploads, ctx)

    def hypernetwork_size(self) -> tuple[int, int]:
        """(F, H): multiply-adds of one hypernetwork pass, and its parameters."""
        s, n, layers = self.settings, self.num_clients, len(self.layers)
        e, h = s.embedding_dim, s.hidden_dim
        passes = 2 * (e * h + h * h + h * layers * n)
        return passes, e + e * h + h + h * h + h + h * layers * n + layers * n

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        m, n, p = len(uploads), self.num_clients, self.initial.num_params()
        passes, size = self.hypernetwork_size()
        return m * p + 2 * m * n * p + 3 * m * passes + 10 * m * size

    def relations(self, server_state: ServerState, selected: list[int]) -> Tensor:
        """alpha of the selected clients' hypernetworks."""
        rows = torch.tensor(selected, dtype=torch.long)
        nets = {k: v[rows] for k, v in server_state["hypernetworks"].items()}
        cube = server_state["cube"].clone()
        cube[rows] = aggregation_weights(nets, len(self.layers)).detach()
        return cube

    def preparation_flops(self, server_state: ServerState, selected: Sequence[int]) -> int:
        m, n, p = len(selected), self.num_clients, self.initial.num_params()
        return m * self.hypernetwork_size()[0] + 2 * m * n * p

    # --- client task: plain local training from the personalized aggregate -------------
    def begin_task(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> ModelState:
        return state["local"].merge(payload or {})
