"""KAPC (paper 004, Sec. 4, Algorithms 1, 2 and 5): knowledge-aware parameter coaching.

The server keeps every client's latest model W = {w_1 .. w_N} and a
relationship cube R (N x L x N): r^l_ij says how much client i's layer l
draws on client j's. (Storage, per-client downloads and the round flow are
:mod:`mecsim.algorithms.layerwise`'s.) Each client i gets its own server
model, layer by layer

    s^l_i = sum_j r^l_ij w^l_j                                    (eq. 15)

and trains its own model w_i on

    f_i(w_i) + lambda ||w_i - s_i||^2                             (eqs. 16-17)

for E local epochs, then uploads w_i, which the server stores. Before the
next round's downloads (a timed server job on the new selection S), the
server updates R by E_r gradient steps on the rows of S, with W fixed:

    f(r_i) = lambda sum_l ||r^l_i W^l - w^l_i||^2 + beta/2 ||r_i - 1/N||^2   (eq. 11)
    r_i <- r_i - eta_r (lambda grad f_s + beta (r_i - 1/N))                    (eqs. 12-13)

and normalizes every row r^l_i to sum 1 (clipped at 0 first), then builds
s_i for each client of S.

Partial participation (Algorithm 5): the step runs on the slice R' = R[S, :, S]
of the m selected clients, normalized by row (line 6); the updated slice is
written into R's slice as it is, and then each of the selection's rows of R
is normalized over all N clients (line 12: "update the corresponding
relationship in R with R' and normalize R by row"). The rows of S thus give
the slice, which sums to 1, weight 1 against what they hold outside S, and a
client's self-relationship r_ii grows each time it is selected. Rows of
clients not selected are left as they are. With full participation this is
Algorithm 1. A client's stale model stands in for it until it uploads again
(eq. 33), and s_i mixes all N columns of its row.

Choices the paper leaves open, and the values taken:

* R starts uniform at random in [0, 1) (the algorithm's seeded stream),
  normalized by row ("initializes ... the relationship cube randomly").
* The uniform target of the beta term is 1/N, as eq. (12) writes it, also
  on a slice of m < N clients (an earlier mecsim reading used 1/m there).
* s_i holds parameters only: the regularizer never reads buffers, so the
  download carries parameters (BatchNorm statistics stay on the client;
  this is Table 6's 0.37 MB smaller KAPC download).
* The R step runs on each layer's Gram matrix G^l = W^l W^l^T (exact:
  grad_{r^l_i} f_s = 2 (r^l_i G^l - G^l_i)); float64 on the server.
* Defaults (Sec. 7.1 and 7.3): E = 5 epochs, E_r = 1, lr 0.01 for W and R,
  lambda = 1, beta = 0.005 (the alpha = 0.1 values of Fig. 6).

Server FLOPs of preparing a round (m selected, N clients, P parameters in
L layers), in closed form (:func:`relation_flops`): the Gram matrices
2 m^2 P; per step and layer 2 m^3 + 7 m^2; normalizing the slice before and
after the steps 4 m^2 L, and the selection's full rows after the write-back
2 m N L; the m server models 2 m N P. Storing the uploads is a copy (0).
The server state holds the N client models, R and the selection's s_i.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import (
    MAX_LR,
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
)
from mecsim.algorithms.layerwise import LayerwiseMixing
from mecsim.algorithms.losses import cross_entropy_loss, proximal
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.common.rng import numpy_rng
from mecsim.learning.models.layers import Layer
from mecsim.learning.state import Payload, TensorDict
from mecsim.learning.training import Loss


class KAPCSettings(AlgorithmSettings):
    epochs: int = Field(default=5, ge=1, description="E: local epochs per round")
    lr: float = Field(default=0.01, gt=0, le=MAX_LR, description="eta_w: learning rate of W")
    lam: float = Field(default=1.0, ge=0, description="lambda: weight of ||w_i - s_i||^2")
    beta: float = Field(default=0.005, ge=0, description="beta: pull of R toward uniform")
    relation_lr: float = Field(default=0.01, gt=0, description="eta_r: learning rate of R")
    relation_steps: int = Field(
        default=1, ge=0, le=10_000, description="E_r: gradient steps on R per round"
    )


# --- the relationship cube -------------------------------------------------------------


def normalize_rows(cube: Tensor) -> Tensor:
    """Each row r^l_i clipped at 0 and scaled to sum 1 (uniform where it sums to 0)."""
    cube = cube.clamp_min(0.0)
    total = cube.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(cube, 1.0 / cube.shape[-1])
    return torch.where(total > 0, cube / total.where(total > 0, torch.ones_like(total)), uniform)


def layer_grams(models: list[TensorDict], layers: tuple[Layer, ...]) -> Tensor:
    """G[l] = W^l W^l^T over the m models' parameters of layer l: [L, m, m], float64."""
    grams = []
    for layer in layers:
        flat = torch.stack(
            [torch.cat([m[k].reshape(-1) for k in layer.param_names]) for m in models]
        ).double()
        grams.append(flat @ flat.T)
    return torch.stack(grams)


def relation_objective(
    block: Tensor, grams: Tensor, lam: float, beta: float, target: float | None = None
) -> Tensor:
    """Eq. (11) summed over the block's rows: block [m, L, m], grams [L, m, m].

    ||sum_j r_j w_j - w_i||^2 = r G r^T - 2 (r G)_i + G_ii, per layer; ``target``:
    the beta term's uniform value (1/N; None: 1/m, the block's own width).
    """
    target = 1.0 / block.shape[0] if target is None else target
    by_layer = block.transpose(0, 1)  # [L, m(i), m(j)]
    mixed = by_layer @ grams  # (r G)_ij
    quadratic = (mixed * by_layer).sum(-1)  # r G r^T, [L, m]
    cross = torch.diagonal(mixed, dim1=1, dim2=2)  # (r_i G)_i
    own = torch.diagonal(grams, dim1=1, dim2=2)  # G_ii
    coaching = (quadratic - 2 * cross + own).sum()
    return lam * coaching + beta / 2 * ((block - target) ** 2).sum()


def relation_gradient(
    block: Tensor, grams: Tensor, lam: float, beta: float, target: float | None = None
) -> Tensor:
    """Gradient of :func:`relation_objective`: 2 lambda (r^l G^l - G^l) + beta (r - target)."""
    target = 1.0 / block.shape[0] if target is None else target
    by_layer = block.transpose(0, 1)
    coaching = 2 * (by_layer @ grams - grams)  # [L, m, m]; G symmetric
    return lam * coaching.transpose(0, 1) + beta * (block - target)


def update_relations(
    cube: Tensor, sources: list[int], grams: Tensor, settings: KAPCSettings
) -> Tensor:
    """Algorithm 5, lines 6-12: E_r steps on the slice of ``sources`` (normalized by row,
    beta's target 1/N), written into R's slice, then the selection's rows of R normalized."""
    rows = torch.tensor(sources)
    block = normalize_rows(cube[rows][:, :, rows])
    target = 1.0 / cube.shape[-1]
    for _ in range(settings.relation_steps):
        step = relation_gradient(block, grams, settings.lam, settings.beta, target)
        block = block - settings.relation_lr * step
    block = normalize_rows(block)
    updated = cube.clone()
    updated[
        rows.view(-1, 1, 1), torch.arange(cube.shape[1]).view(1, -1, 1), rows.view(1, 1, -1)
    ] = block
    updated[rows] = normalize_rows(updated[rows])
    return updated


def relation_flops(m: int, n: int, params: int, layers: int, steps: int) -> int:
    """Server FLOPs of preparing m selected clients' downlinks (see the module docstring)."""
    grams = 2 * m * m * params
    step = layers * (2 * m**3 + 7 * m * m)
    write_back = 4 * m * m * layers + 2 * m * n * layers
    mixtures = 2 * m * n * params
    return grams + steps * step + write_back + mixtures


# --- the algorithm -------------------------------------------------------------------


@ALGORITHMS.register("kapc", "KAPC: per-client server models from a layer-wise relationship cube")
class KAPC(LayerwiseMixing):
    """Each client is coached toward its own layer-wise mixture of all clients' models."""

    Settings = KAPCSettings

    def init_server_state(self) -> ServerState:
        n, layers = self.num_clients, len(self.layers)
        seed = int(numpy_rng(self.seed, "algorithm", "cube").integers(2**62))
        generator = torch.Generator().manual_seed(seed)
        cube = normalize_rows(torch.rand(n, layers, n, generator=generator, dtype=torch.float64))
        return self.initial_server_state(cube)

    def relations(self, server_state: ServerState, selected: list[int]) -> Tensor:
        """Algorithm 5, lines 6-12: E_r steps on the selection's slice of R, written back."""
        models = server_state["models"]
        latest = [{k: v[c] for k, v in models.items()} for c in selected]
        grams = layer_grams(latest, self.layers)
        return update_relations(server_state["cube"], selected, grams, self.settings)

    def preparation_flops(self, server_state: ServerState, selected: Sequence[int]) -> int:
        return relation_flops(
            len(selected),
            self.num_clients,
            self.initial.num_params(),
            len(self.layers),
            self.settings.relation_steps,
        )

    # --- client task -----------------------------------------------------------------
    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        """s_i's parameters; a layer not received is regularized toward the client's own
        model of the last round (eq. 20's w-hat)."""
        own = state["local"].params
        received = payload or {}
        return {k: received.get(k, own[k]) for k in own}

    def loss(self, task: Task) -> Loss:
        lam = self.settings.lam
        ce = cross_entropy_loss(task.split)

        def kapc_loss(forward, params, batch, server_model):  # eq. (16)
            return ce(forward, params, batch, server_model) + lam * proximal(params, server_model)

        return kapc_loss
