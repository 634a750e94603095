"""pFedLA: layer-wise aggregation weights from per-client hypernetworks (KAPC's baseline)."""

from __future__ import annotations

import copy

import torch

import mecsim
from mecsim.algorithms.pfedla import (
    PFedLASettings,
    aggregation_weights,
    hypernetwork_step,
    init_hypernetworks,
)

PARAMS = 13_706


def test_hypernetworks_start_uniform_and_a_step_ascends_the_surrogate():
    nets = init_hypernetworks(3, 2, PFedLASettings(), seed=0)
    alpha = aggregation_weights(nets, 2)
    torch.testing.assert_close(alpha, torch.full((3, 2, 3), 1 / 3, dtype=torch.float64))

    torch.manual_seed(0)
    directions = torch.randn(3, 2, 3, dtype=torch.float64)
    moments = {f"{p}.{k}": torch.zeros_like(v) for k, v in nets.items() for p in "mv"}
    stepped, _, steps = hypernetwork_step(nets, moments, torch.zeros(3), directions, 2, 0.01)

    before = (alpha * directions).sum()
    after = (aggregation_weights(stepped, 2) * directions).sum()
    assert after > before
    assert steps.tolist() == [1.0, 1.0, 1.0]


def test_pfedla_learns_per_client_layer_weights(tiny):
    overrides = [
        "algorithm.name=pfedla",
        "algorithm.epochs=1",
        "algorithm.lr=0.05",
        "protocol.rounds=3",
        "clients.count=6",
        "protocol.clients_per_round=3",
    ]
    result = mecsim.run(copy.deepcopy(tiny), overrides, write=False)
    state = result.server_state
    uploads = result.events.query("phase == 'upload'")
    counts = uploads.groupby("client").size().reindex(range(6), fill_value=0)
    assert state["adam_steps"].tolist() == counts.astype(float).tolist()  # one step per upload
    cube = state["cube"]
    alpha = aggregation_weights(state["hypernetworks"], cube.shape[1])
    torch.testing.assert_close(alpha.sum(-1), torch.ones(6, cube.shape[1], dtype=cube.dtype))
    stepped = [c for c in range(6) if counts[c] > 0]
    assert not torch.allclose(alpha[stepped[0]], alpha[stepped[1]])  # personalized

    n, m, layers = 6, 3, cube.shape[1]
    e = h = 32
    passes = 2 * (e * h + h * h + h * layers * n)
    size = e + e * h + h + h * h + h + h * layers * n + layers * n
    aggregate = m * PARAMS + 2 * m * n * PARAMS + 3 * m * passes + 10 * m * size
    assert (result.events.query("phase == 'aggregate'")["flops"] == aggregate).all()
    prepare = m * passes + 2 * m * n * PARAMS
    assert (result.events.query("phase == 'server:prepare'")["flops"] == prepare).all()
    local = result.events.query("phase == 'compute:local'")["flops"]
    fedavg = mecsim.run(tiny, ["algorithm.epochs=1", "protocol.rounds=1"], write=False)
    assert local.iloc[0] == fedavg.events.query("phase == 'compute:local'")["flops"].iloc[0]
