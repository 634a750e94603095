"""Forward FLOPs per sample, counted once per architecture."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import mecsim.learning.models.flops as flops_module
from mecsim.learning.models import MODELS, build_model, forward_flops_per_sample


def test_linear_layer_is_two_flops_per_multiply_add():
    model = nn.Sequential(nn.Linear(10, 5))

    assert forward_flops_per_sample(model, (10,)) == 2 * 10 * 5


def test_cnn_small_on_digits_matches_a_hand_count():
    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    conv1 = 2 * 16 * 8 * 8 * (1 * 3 * 3)
    conv2 = 2 * 32 * 4 * 4 * (16 * 3 * 3)
    fc = 2 * (32 * 2 * 2) * 64 + 2 * 64 * 10

    assert forward_flops_per_sample(model, (1, 8, 8)) == conv1 + conv2 + fc


def test_flops_grow_with_the_input():
    small = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    large = build_model("cnn-small", input_shape=(1, 28, 28), num_classes=10, seed=0)

    assert forward_flops_per_sample(small, (1, 8, 8)) < forward_flops_per_sample(large, (1, 28, 28))


def test_counting_leaves_the_model_untouched():
    model = build_model("resnet18", input_shape=(3, 8, 8), num_classes=10, seed=0).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    flops = forward_flops_per_sample(model, (3, 8, 8))

    assert flops > 0
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_each_architecture_is_counted_once(monkeypatch):
    counted = []

    class CountingMode(flops_module.FlopCount):
        def __init__(self) -> None:
            counted.append(1)
            super().__init__()

    monkeypatch.setattr(flops_module, "FlopCount", CountingMode)
    monkeypatch.setattr(flops_module, "_CACHE", {})
    first = build_model("cnn-comet", input_shape=(1, 8, 8), num_classes=10, seed=0)
    second = build_model("cnn-comet", input_shape=(1, 8, 8), num_classes=10, seed=1)
    other = build_model("cnn-persfl", input_shape=(1, 8, 8), num_classes=10, seed=0)

    values = [forward_flops_per_sample(m, (1, 8, 8)) for m in (first, second, other)]

    assert len(counted) == 2
    assert values[0] == values[1] != values[2]


@pytest.mark.parametrize("name", sorted(MODELS.names()))
@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32)])
def test_flop_count_agrees_with_torchs_flop_counter_on_a_training_step(name, shape):
    model = build_model(name, input_shape=shape, num_classes=10, seed=0).train()
    x, y = torch.zeros(4, *shape), torch.zeros(4, dtype=torch.long)

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        torch.autograd.grad(loss, list(model.parameters()))

    with FlopCounterMode(display=False) as reference:
        step()
    with flops_module.FlopCount() as ours:
        step()

    assert ours.total == reference.get_total_flops() > 0


def test_a_model_with_unknown_modules_is_counted():
    class Bilinear(nn.Module):  # a matrix product outside any Linear or Conv layer
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(6, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.flatten(x, 1) @ self.w

    assert forward_flops_per_sample(Bilinear(), (1, 2, 3)) == 2 * 6 * 4


@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32)])
def test_cached_value_depends_on_input_shape(shape):
    model = build_model("mlp", input_shape=shape, num_classes=10, seed=0)
    inputs = shape[0] * shape[1] * shape[2]

    assert forward_flops_per_sample(model, shape) == 2 * (inputs * 200 + 200 * 200 + 200 * 10)
