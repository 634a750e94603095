"""FedAMP (Huang et al., AAAI 2021): attentive message passing, the cosine variant.

As in KAPC (paper 004, whose Tables 1/5/6 compare against it), each client i
keeps its own model w_i and trains

    f_i(w_i) + lambda ||w_i - u_i||^2

toward its own cloud model u_i, which the server builds from the clients'
latest models with attention on their similarity (HeurFedAMP, the cosine
form the KAPC paper describes):

    xi_ij = (1 - xi_self) exp(sigma cos(w_i, w_j)) / sum_{h in S, h != i} exp(sigma cos(w_i, w_h))
    xi_ii = xi_self,   u_i = sum_j xi_ij w_j

over the clients S selected for the round (their latest models), computed
before the round's downloads. The client side - the task, the loss, per-client
downloads of u_i's parameters - is KAPC's (:class:`~mecsim.algorithms.kapc.KAPC`).

Defaults: lambda = 1 (the FedAMP code's lamda / (2 alphaK) with both 1 is
0.5; lambda = 1 matches KAPC's weight for a like-for-like comparison),
sigma = 1, xi_self = 0.5; E = 5 local epochs, lr 0.01 (KAPC's Sec. 7.1
settings for every baseline).

Server FLOPs of preparing a round (m selected of N clients, P parameters),
in closed form: their Gram matrix 2 m^2 P (cosines from it), the attention
6 m^2, the m cloud models 2 m N P (a dense mix over the N stored models).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import MAX_LR, AlgorithmSettings, ServerState
from mecsim.algorithms.kapc import KAPC
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.learning.state import TensorDict


class FedAMPSettings(AlgorithmSettings):
    epochs: int = Field(default=5, ge=1, description="local epochs per round")
    lr: float = Field(default=0.01, gt=0, le=MAX_LR, description="local SGD learning rate")
    lam: float = Field(default=1.0, ge=0, description="lambda: weight of ||w_i - u_i||^2")
    sigma: float = Field(default=1.0, gt=0, description="attention sharpness on cosines")
    self_weight: float = Field(
        default=0.5, ge=0, le=1, description="xi_self: weight of a client's own model in u_i"
    )


def attention_weights(gram: Tensor, sources: list[int], sigma: float, self_weight: float) -> Tensor:
    """xi [N, N] from the Gram matrix of all N models: softmax of sigma cos over the
    sources (other than i), scaled to 1 - xi_self, plus xi_self on the diagonal."""
    n = gram.shape[0]
    norms = gram.diagonal().clamp_min(1e-24).sqrt()
    cosine = gram / (norms[:, None] * norms[None, :])
    allowed = torch.zeros(n, n, dtype=torch.bool)
    allowed[:, sources] = True
    allowed.fill_diagonal_(False)
    logits = torch.where(allowed, sigma * cosine, torch.full_like(cosine, -torch.inf))
    others = torch.softmax(logits, dim=1).nan_to_num(0.0)  # a row with no source: zeros
    has_others = allowed.any(dim=1, keepdim=True)
    xi = torch.where(has_others, (1 - self_weight) * others, others)
    own = torch.where(has_others.squeeze(1), self_weight, 1.0).to(xi.dtype)
    return xi + torch.diag(own)


def flat_gram(models: TensorDict, keys: list[str]) -> Tensor:
    """Gram matrix [N, N] of the stacked models' parameters ``keys``, float64."""
    flat = torch.cat([models[k].reshape(models[k].shape[0], -1) for k in keys], dim=1).double()
    return flat @ flat.T


@ALGORITHMS.register("fedamp", "FedAMP: per-client cloud models by attention on cosine similarity")
class FedAMP(KAPC):
    """KAPC's client side; cloud models from cosine attention instead of a learned cube."""

    Settings = FedAMPSettings

    def init_server_state(self) -> ServerState:
        state = super().init_server_state()
        return {
            **state,
            "cube": self.layer_weights(torch.eye(self.num_clients, dtype=torch.float64)),
        }

    def layer_weights(self, xi: Tensor) -> Tensor:
        """The same weights for every layer: xi as a cube [N, L, N]."""
        return xi.unsqueeze(1).expand(-1, len(self.layers), -1).contiguous()

    def relations(self, server_state: ServerState, selected: list[int]) -> Tensor:
        """Rows of the selection: attention over the selection's cosines, every layer alike."""
        s, rows = self.settings, torch.tensor(selected)
        models = {k: v[rows] for k, v in server_state["models"].items()}
        gram = flat_gram(models, list(self.initial.params))
        xi = attention_weights(gram, list(range(len(selected))), s.sigma, s.self_weight)
        full = torch.zeros(len(selected), self.num_clients, dtype=torch.float64)
        full[:, rows] = xi
        cube = server_state["cube"].clone()
        cube[rows] = self.layer_weights(full)
        return cube

    def preparation_flops(self, server_state: ServerState, selected: Sequence[int]) -> int:
        m, n, p = len(selected), self.num_clients, self.initial.num_params()
        return 2 * m * m * p + 6 * m * m + 2 * m * n * p
