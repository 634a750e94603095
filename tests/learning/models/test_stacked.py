"""The hand-batched forward pass equals vmap's batching rules, values and gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import grad, vmap

import mecsim.learning.training
from mecsim.learning.models import build_model
from mecsim.learning.models.cnn import ConvNet
from mecsim.learning.models.stacked import stacked_forward
from mecsim.learning.state import ModelState, stack
from mecsim.learning.training import ModelFunction

CLIENTS, BATCH = 3, 5


def conv_head() -> nn.Sequential:
    """Strides, dilation, grouped convs, no bias, a conv head: the less common paths."""
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Conv2d(4, 6, 3, padding=2, dilation=2, groups=2),
        nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
        nn.Conv2d(6, 5, 1),
    )


class NegatedConvNet(ConvNet):
    """A ConvNet whose forward is its own: the hand-batched one would not know it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return -super().forward(x)


MODELS = {
    "cnn-small": lambda: build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0),
    "cnn-small-bn": lambda: build_model(
        "cnn-small-bn", input_shape=(1, 8, 8), num_classes=10, seed=0
    ),
    "cnn-kapc": lambda: build_model("cnn-kapc", input_shape=(1, 28, 28), num_classes=10, seed=0),
    "cnn-persfl": lambda: build_model(
        "cnn-persfl", input_shape=(3, 32, 32), num_classes=10, seed=0
    ),
    "mlp": lambda: build_model("mlp", input_shape=(1, 8, 8), num_classes=10, seed=0),
    "conv-head": conv_head,
}
SHAPES = {
    "cnn-small": (1, 8, 8),
    "cnn-small-bn": (1, 8, 8),
    "cnn-kapc": (1, 28, 28),
    "cnn-persfl": (3, 32, 32),
    "mlp": (1, 8, 8),
    "conv-head": (2, 9, 9),
}


def client_states(model: nn.Module) -> tuple[dict, dict]:
    """Stacked parameters and buffers of clients that differ from each other."""
    g = torch.Generator().manual_seed(1)
    states = []
    for _ in range(CLIENTS):
        base = ModelState.of(model)
        params = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in base.params.items()}
        buffers = {
            k: v if v.dtype == torch.long else v + 0.1 * torch.rand(v.shape, generator=g)
            for k, v in base.buffers.items()
        }
        states.append(ModelState(params, buffers))
    return stack([s.params for s in states]), stack([s.buffers for s in states])


def run(function: ModelFunction, params: dict, buffers: dict, x: torch.Tensor):
    """Per-client outputs, updated buffers and the gradients of a loss of both outputs."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    buffers = {k: v.clone() for k, v in buffers.items()}

    def per_client(p, b, x):
        b = {k: v.clone() for k, v in b.items()}
        out = function(p, b, x)
        value = out["logits"].square().mean() + out["features"].sin().mean()
        return value, out["logits"], out["features"], b

    values, logits, features, new_buffers = vmap(per_client)(leaves, buffers, x)
    grads = torch.autograd.grad(values.sum(), list(leaves.values()))
    return logits, features, new_buffers, dict(zip(leaves, grads, strict=True))


@pytest.fixture
def hits(monkeypatch):
    """How many calls took the hand-batched path."""
    count = {"hand": 0}
    original = mecsim.learning.training.call_stacked

    def counted(*args):
        out = original(*args)
        count["hand"] += out is not None
        return out

    monkeypatch.setattr(mecsim.learning.training, "call_stacked", counted)
    return count


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("training", [True, False])
def test_hand_batched_forward_equals_vmap_rules(name, training, hits):
    model = MODELS[name]()
    model.train(training)
    params, buffers = client_states(model)
    x = torch.randn(CLIENTS, BATCH, *SHAPES[name], generator=torch.Generator().manual_seed(2))
    hand = run(ModelFunction(model), params, buffers, x)
    assert hits["hand"] == 1
    rules = run(ModelFunction(model, hand_batched=False), params, buffers, x)
    assert hits["hand"] == 1  # the second run went through vmap's rules
    for a, b in zip(hand[:2], rules[:2], strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for key in buffers:  # BatchNorm's running statistics (and batch count) per client
        torch.testing.assert_close(hand[2][key], rules[2][key], rtol=1e-5, atol=1e-6)
    if training and buffers:
        changed = [k for k in buffers if not torch.equal(hand[2][k], buffers[k])]
        assert changed  # running statistics did update
    for key in params:
        torch.testing.assert_close(hand[3][key], rules[3][key], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "model",
    [
        build_model("resnet18", input_shape=(3, 32, 32), num_classes=10, seed=0),
        nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2)),
        nn.Sequential(nn.Conv2d(1, 2, 3, padding="same"), nn.Flatten(), nn.Linear(18, 2)),
        nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2, momentum=None), nn.Flatten()),
        nn.Sequential(nn.ReLU(), nn.Flatten()),
        nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2, return_indices=True)),
        NegatedConvNet((1, 8, 8), [(2, 3, 1)], [], 3),
    ],
    ids=[
        "resnet18",
        "dropout",
        "same-padding",
        "cumulative-bn",
        "no-weights",
        "pool-indices",
        "convnet-subclass",
    ],
)
def test_models_with_an_unsupported_part_have_no_hand_batched_forward(model):
    assert stacked_forward(model) is None


def test_a_vmap_inside_another_transform_runs_through_vmap_rules(hits):
    model = MODELS["cnn-small"]()
    params, buffers = client_states(model)
    x = torch.randn(CLIENTS, BATCH, 1, 8, 8)

    def loss_of(function):
        return lambda p, b, x: function(p, b, x)["logits"].square().mean()

    # inside grad the tensors are wrapped at grad's level, above the vmap's
    grads = vmap(grad(loss_of(ModelFunction(model))))(params, buffers, x)
    assert hits["hand"] == 0
    rules = vmap(grad(loss_of(ModelFunction(model, hand_batched=False))))(params, buffers, x)
    for key in params:
        assert torch.equal(grads[key], rules[key])


def test_a_call_that_lacks_a_tensor_runs_through_vmap_rules(hits):
    model = MODELS["cnn-small"]()
    params, buffers = client_states(model)
    partial = {k: v for k, v in params.items() if k != "classifier.2.bias"}
    x = torch.randn(CLIENTS, BATCH, 1, 8, 8)
    out = vmap(ModelFunction(model), in_dims=(0, 0, 0))(partial, buffers, x)
    assert hits["hand"] == 0  # functional_call takes the missing bias from the template
    rules = vmap(ModelFunction(model, hand_batched=False))(partial, buffers, x)
    torch.testing.assert_close(out["logits"], rules["logits"])


def test_outside_vmap_the_model_runs_as_usual(hits):
    model = MODELS["cnn-small"]()
    state = ModelState.of(model)
    x = torch.randn(BATCH, 1, 8, 8)
    out = ModelFunction(model)(state.params, state.buffers, x)
    assert hits["hand"] == 0
    torch.testing.assert_close(out["logits"], model(x))
