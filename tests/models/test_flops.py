"""Forward FLOPs per sample, counted once per architecture."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mecsim.models.flops as flops_module
from mecsim.models import build_model, forward_flops_per_sample


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

    class CountingMode(flops_module.FlopCounterMode):
        def __init__(self, *args, **kwargs):
            counted.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(flops_module, "FlopCounterMode", CountingMode)
    monkeypatch.setattr(flops_module, "_CACHE", {})
    first = build_model("cnn-comet", input_shape=(1, 8, 8), num_classes=10, seed=0)
    second = build_model("cnn-comet", input_shape=(1, 8, 8), num_classes=10, seed=1)
    other = build_model("cnn-persfl", input_shape=(1, 8, 8), num_classes=10, seed=0)

    values = [forward_flops_per_sample(m, (1, 8, 8)) for m in (first, second, other)]

    assert len(counted) == 2
    assert values[0] == values[1] != values[2]


@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32)])
def test_cached_value_depends_on_input_shape(shape):
    model = build_model("mlp", input_shape=shape, num_classes=10, seed=0)
    inputs = shape[0] * shape[1] * shape[2]

    assert forward_flops_per_sample(model, shape) == 2 * (inputs * 200 + 200 * 200 + 200 * 10)
