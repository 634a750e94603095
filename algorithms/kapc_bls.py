"""KAPC with bidirectional layer selection (paper 004, Sec. 5-6, Algorithms 3-6).

KAPC (:mod:`mecsim.algorithms.kapc`), with fewer layers on the air each way:

* Server (Algorithm 3): layer l of s_i is not sent to client i when its
  self-relationship r^l_ii exceeds ``mu``: s_i would mostly be w_i itself.
* Client (Algorithm 4): after training, client i uploads only its first
  Omega_i layers, Omega_i from the generalization-bound criterion (29)

      L d_Omega M(Omega) / (Omega c_i 2^(L - Omega))  <  M(L) prod_{l > Omega} B^l

  with M(k) = sum_{l <= k} tau^l / (2^(k - l + 1) B^l), B^l = ||w^l_i|| (eq. 30)
  and tau^l = ||w^l_i - s^l_i|| (eq. 31): the partial regularizer's bound per
  shared layer is below the full one's. The search starts from the previous
  Omega and walks to a neighbour (lines 15-24); a client selected for the
  first time, or whose last Omega was L, takes the maximum of its stored
  and current bounds and uploads L - 1 layers (lines 3-9).
* Missing layers keep stale values on both sides (eqs. 33-34): the server
  mixes a client's last received layer; a client regularizes a layer it did
  not receive toward its own model of the last round (eq. 20's w-hat).

Constants the paper leaves open, and the values taken:

* rho (the Lipschitz constant of the loss), A_i (the input norm bound), the
  loss range [a, b] and delta appear in (27) only in factors common to both
  sides or in the term (28) drops as "almost zero": they cancel, and no
  value is needed.
* d_Omega is the output width of layer Omega (a conv's channels, a linear
  layer's features); c_i the number of classes in client i's training data
  (all classes in cost-only runs, which have no labels).
* M(.) is read from the garbled (26)-(27) as the geometric sum above.
* "Repeat Omega <- Omega - 1 until (29) is not satisfied" returns the
  smallest Omega that still satisfies (29); increasing stops at the first
  Omega that satisfies it, or at L.
* In cost-only runs (no values) the criterion cannot be evaluated: clients
  upload every layer.
* ``mu`` = 0.7 (Table 6); ``client_selection = false`` disables Algorithm 4
  (Omega = L).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import ClientState, RoundContext, ServerState, Task
from mecsim.algorithms.kapc import KAPC, KAPCSettings
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.models.layers import Layer
from mecsim.state import Payload, TensorDict
from mecsim.training import TrainResult


class KAPCBLSSettings(KAPCSettings):
    mu: float = Field(default=0.7, ge=0, description="self-relationship threshold (Algorithm 3)")
    client_selection: bool = Field(
        default=True, description="choose the uploaded layers by criterion (29) (Algorithm 4)"
    )


def layer_norms(tensors: TensorDict, layers: tuple[Layer, ...]) -> Tensor:
    """Frobenius norm of each layer's parameters, [L] (eqs. 30-31)."""
    return torch.stack(
        [
            torch.sqrt(sum((tensors[k].double() ** 2).sum() for k in layer.param_names))
            for layer in layers
        ]
    )


def bound_sum(bounds: Tensor, gaps: Tensor, depth: int) -> float:
    """M(depth) = sum_{l <= depth} tau^l / (2^(depth - l + 1) B^l)."""
    total = 0.0
    for level in range(1, depth + 1):
        total += float(gaps[level - 1]) / (2 ** (depth - level + 1) * float(bounds[level - 1]))
    return total


def criterion(depth: int, bounds: Tensor, gaps: Tensor, widths: list[int], classes: int) -> bool:
    """Inequality (29): sharing the first ``depth`` layers lowers the mean bound per layer."""
    layers = len(bounds)
    lhs = layers * widths[depth - 1] * bound_sum(bounds, gaps, depth)
    lhs /= depth * classes * 2 ** (layers - depth)
    rhs = bound_sum(bounds, gaps, layers) * math.prod(float(b) for b in bounds[depth:])
    return lhs < rhs


def search_depth(start: int, bounds: Tensor, gaps: Tensor, widths: list[int], classes: int) -> int:
    """Algorithm 4, lines 15-24: walk from ``start`` to the neighbouring Omega."""
    layers = len(bounds)
    depth = min(max(start, 1), layers)
    if criterion(depth, bounds, gaps, widths, classes):
        while depth > 1 and criterion(depth - 1, bounds, gaps, widths, classes):
            depth -= 1
        return depth
    while depth < layers and not criterion(depth, bounds, gaps, widths, classes):
        depth += 1
    return depth


@ALGORITHMS.register("kapc_bls", "KAPC + bidirectional layer selection (mu; criterion (29))")
class KAPCBLS(KAPC):
    """KAPC that leaves out self-coached layers going down and deep layers going up."""

    payload_from_training = "the layers of each upload and download, criteria (29) and mu"

    Settings = KAPCBLSSettings

    def downlink_keys(self, server_state: ServerState, client: int) -> list[str]:
        """Algorithm 3: the layers whose self-relationship is at most mu."""
        cube, mu = server_state["cube"], self.settings.mu
        return [
            k
            for index, layer in enumerate(self.layers)
            if float(cube[client, index, client]) <= mu
            for k in layer.param_names
        ]

    def init_client_state(self, client: int) -> ClientState:
        layers = len(self.layers)
        zeros = torch.zeros(layers, dtype=torch.float64)
        return {
            **super().init_client_state(client),
            "omega": layers,
            "times": 0,
            "B": zeros,
            "tau": zeros,
        }

    def classes(self, client: int) -> int:
        """c_i: classes present in the client's training data."""
        if self.label_counts is None:
            return int(
                self.arch(client).initial.params[self.arch(client).head.param_names[0]].shape[0]
            )
        return int((self.label_counts[client] > 0).sum())

    def end_task(
        self, task: Task, state: ClientState, result: TrainResult, ctx: RoundContext
    ) -> None:
        super().end_task(task, state, result, ctx)
        state["omega"] = self.select_layers(state, result.state.params, ctx)
        state["times"] += 1

    def select_layers(self, state: ClientState, trained: TensorDict, ctx: RoundContext) -> int:
        """Algorithm 4: Omega_i, updating the client's stored bounds B and tau."""
        layers = self.layers
        total = len(layers)
        if not self.settings.client_selection or next(iter(trained.values())).is_meta:
            return total
        received = ctx.received or {}
        regularizer = {k: received.get(k, trained[k]) for k in trained}
        bounds = layer_norms(trained, layers)
        gaps = layer_norms({k: trained[k] - regularizer[k] for k in trained}, layers)
        if state["times"] == 0 or state["omega"] == total:  # lines 3-9
            state["B"] = torch.maximum(state["B"], bounds)
            state["tau"] = torch.maximum(state["tau"], gaps)
            return total - 1
        got = torch.tensor([all(k in received for k in layer.param_names) for layer in layers])
        state["B"] = bounds
        state["tau"] = torch.where(got, gaps, state["tau"])
        widths = [int(trained[layer.param_names[0]].shape[0]) for layer in layers]
        return search_depth(
            state["omega"], state["B"], state["tau"], widths, self.classes(ctx.client)
        )

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        """The first Omega_i layers (parameters and buffers)."""
        keys = self.arch(ctx.client).layer_keys(self.layers[: state["omega"]])
        return state["local"].select(keys)
