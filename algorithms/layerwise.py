"""What KAPC, FedAMP and pFedLA share: per-client server models, mixed layer by layer.

The server keeps every client's latest model W = {w_1 .. w_N} (stacked per
entry) and a weight cube C (N x L x N). Before a synchronous round's
downloads (a timed server job, :meth:`~Algorithm.prepare_downlinks`) it
updates the rows of the selected clients S (:meth:`LayerwiseMixing.relations`:
KAPC's learned relationship cube, FedAMP's attention, pFedLA's hypernetworks)
and builds each selected client's own model

    s^l_i = sum_j C[i, l, j] w^l_j                                  (layer l)

whose parameters it sends to client i (one payload per client; a client keeps
its own buffers). Each client trains its own model (key ``local``) and
uploads it; the server stores the uploads, and an entry a client did not send
keeps its stale value (KAPC's eq. 33). A client's personalized model is its
own trained model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from mecsim.algorithms.base import (
    Algorithm,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.learning.models.layers import Layer
from mecsim.learning.state import ModelState, Payload, TensorDict


def mix_layers(cube: Tensor, models: TensorDict, layers: tuple[Layer, ...]) -> TensorDict:
    """s^l_i = sum_j cube[i, l, j] w^l_j for each row i of ``cube``, stacked per parameter."""
    out: TensorDict = {}
    for index, layer in enumerate(layers):
        weights = cube[:, index, :]
        for k in layer.param_names:
            stacked = models[k]
            out[k] = torch.tensordot(weights.to(stacked.device, stacked.dtype), stacked, dims=1)
    return out


class LayerwiseMixing(Algorithm):
    """Per-client server models mixed layer by layer from every client's latest model."""

    broadcast = False
    protocols = frozenset({"compute_and_wait", "deadline", "wait_free"})
    tasks = (Task("local", model="local", uploads=True),)

    @property
    def num_clients(self) -> int:
        return len(self.models.client_arch)

    @property
    def layers(self) -> tuple[Layer, ...]:
        return self.arch(None).layers

    def initial_server_state(self, cube: Tensor) -> ServerState:
        """The weight cube, every client's initial model, no server models yet."""
        n = self.num_clients
        models = {k: torch.stack([v] * n) for k, v in self.initial.to_payload().items()}
        return {"cube": cube, "models": models, "server": {}}

    def init_client_state(self, client: int) -> ClientState:
        return {"local": self.initial.clone()}

    # --- server --------------------------------------------------------------------
    def relations(self, server_state: ServerState, selected: list[int]) -> Tensor:
        """The cube with the selected clients' rows brought up to date (required)."""
        raise NotImplementedError(self)

    def prepare_downlinks(
        self, server_state: ServerState, selected: Sequence[int], ctx: RoundContext
    ) -> ServerState:
        """Update the selection's rows of the cube, then build each selected client's model."""
        models, cube = server_state["models"], server_state["cube"]
        if selected and not next(iter(models.values())).is_meta:  # cost-only: C stays
            cube = self.relations(server_state, list(selected))
        rows = mix_layers(cube[list(selected)], models, self.layers)
        server = {c: {k: v[index] for k, v in rows.items()} for index, c in enumerate(selected)}
        return {**server_state, "cube": cube, "server": server}

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        """Store the uploads (entries not sent keep their stale values); drop the round's
        server models."""
        models = server_state["models"]
        for u in uploads:
            for k, v in u.payload.items():
                models[k][u.client] = v.to(models[k].device)
        return {**server_state, "models": models, "server": {}}

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        return 0  # storing the uploads is a copy

    # --- communication ---------------------------------------------------------------
    def downlink_keys(self, server_state: ServerState, client: int) -> list[str]:
        """The parameters of its server model the server sends ``client``: every layer's."""
        return [k for layer in self.layers for k in layer.param_names]

    def downlink(self, server_state: ServerState, ctx: RoundContext) -> Payload:
        assert ctx.client is not None
        server = server_state["server"][ctx.client]
        return {k: server[k] for k in self.downlink_keys(server_state, ctx.client)}

    def upload(self, state: ClientState, ctx: RoundContext) -> Payload:
        return state["local"].to_payload()

    # --- evaluation ------------------------------------------------------------------
    def personal_model(self, client_state: ClientState, server_state: ServerState) -> ModelState:
        return client_state["local"]
