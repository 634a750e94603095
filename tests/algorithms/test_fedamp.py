"""FedAMP: cloud models by attention on cosine similarity (KAPC's baseline)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import mecsim
from mecsim.algorithms.fedamp import attention_weights, flat_gram

PARAMS = 13_706


def test_attention_is_a_softmax_of_cosines_beside_the_self_weight():
    vectors = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    gram = vectors @ vectors.T

    xi = attention_weights(gram, [0, 1, 2], sigma=2.0, self_weight=0.4)

    torch.testing.assert_close(xi.sum(1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(xi.diagonal(), torch.full((3,), 0.4, dtype=torch.float64))
    c = 1 / math.sqrt(2)  # cos(v0, v1); cos(v0, v2) = 0
    expected = 0.6 * math.exp(2 * c) / (math.exp(2 * c) + math.exp(0.0))
    assert float(xi[0, 1]) == pytest.approx(expected, rel=1e-12)


def test_a_client_that_did_not_upload_mixes_the_uploaders_with_itself():
    gram = torch.eye(4, dtype=torch.float64) + 0.5
    xi = attention_weights(gram, [1, 2], sigma=1.0, self_weight=0.5)
    assert xi[0, 3] == 0 and xi[0, 0] == 0.5
    torch.testing.assert_close(xi[0, 1], xi[0, 2])  # equal cosines: equal shares
    assert xi[3, 0] == 0 and xi[3, 3] == 0.5
    lone = attention_weights(gram, [1], sigma=1.0, self_weight=0.5)
    assert lone[1, 1] == 1.0  # nobody else uploaded: its own model


def test_fedamp_weights_the_selections_latest_models(tiny):
    from mecsim.algorithms.fedamp import FedAMP

    seen = []
    original = FedAMP.prepare_downlinks

    def prepare(self, server_state, selected, ctx):
        models = {k: v.clone() for k, v in server_state["models"].items()}
        out = original(self, server_state, selected, ctx)
        seen.append((models, list(selected), out["cube"].clone()))
        return out

    overrides = ["algorithm.name=fedamp", "algorithm.epochs=1", "protocol.rounds=3"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FedAMP, "prepare_downlinks", prepare)
        result = mecsim.run(copy.deepcopy(tiny), [*overrides, "clients.count=6"], write=False)

    for models, selected, cube in seen[1:]:  # round 0: identical initial models
        keys = [k for k in models if k.endswith(("weight", "bias"))]
        xi = attention_weights(flat_gram(models, keys), list(range(6)), 1.0, 0.5)
        torch.testing.assert_close(cube[:, 0, :], xi)
        torch.testing.assert_close(cube[:, 2, :], xi)  # every layer alike
        assert selected == list(range(6))
    prepare_events = result.events.query("phase == 'server:prepare'")
    m = n = 6
    assert (prepare_events["flops"] == 2 * m * m * PARAMS + 6 * m * m + 2 * m * n * PARAMS).all()
    downloads = result.events.query("phase == 'download'")
    assert (downloads["bytes"] == PARAMS * 4).all()
