"""Every formulation of a stacked convolution is each client's own ``F.conv2d``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import vmap

from mecsim.learning.models import build_model, stacked_conv
from mecsim.learning.models.stacked_conv import FORMULATIONS, check_kernels
from mecsim.learning.state import ModelState, stack
from mecsim.learning.training import ModelFunction

LAYERS = {  # (Cin, Cout, k, stride, padding, dilation, groups, bias, H)
    "cnn-small-2": (16, 32, 3, 1, 1, 1, 1, True, 4),
    "strided": (3, 4, 3, 2, 1, 1, 1, False, 9),
    "dilated-grouped": (4, 6, 3, 1, 2, 2, 2, True, 7),
    "pointwise": (5, 3, 1, 1, 0, 1, 1, True, 5),
}


@pytest.mark.parametrize("formulation", list(FORMULATIONS))
@pytest.mark.parametrize("layer", list(LAYERS))
def test_a_formulation_is_every_clients_own_convolution_values_and_gradients(formulation, layer):
    cin, cout, k, stride, padding, dilation, groups, has_bias, h = LAYERS[layer]
    g = torch.Generator().manual_seed(3)
    clients, batch = 3, 4
    x = torch.randn(clients, batch, cin, h, h, generator=g, requires_grad=True)
    w = torch.randn(clients, cout, cin // groups, k, k, generator=g, requires_grad=True)
    b = torch.randn(clients, cout, generator=g, requires_grad=True) if has_bias else None
    pairs = ((stride, stride), (padding, padding), (dilation, dilation))
    out = FORMULATIONS[formulation](x, w, b, *pairs, groups)
    expected = torch.stack(
        [
            F.conv2d(x[i], w[i], None if b is None else b[i], stride, padding, dilation, groups)
            for i in range(clients)
        ]
    )
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    leaves = [t for t in (x, w, b) if t is not None]
    weights = torch.randn(expected.shape, generator=g)
    got = torch.autograd.grad((out * weights).sum(), leaves)
    want = torch.autograd.grad((expected * weights).sum(), leaves)
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_on_a_cpu_auto_keeps_the_grouped_channels_last_convolution():
    assert stacked_conv._choose(torch.zeros(2, 1, 1, 4, 4), None, None, 1, 1, 1, 1) == (
        "grouped_nhwc"
    )
    assert not stacked_conv.uses_formulations(torch.device("cpu"), "auto")
    assert stacked_conv.uses_formulations(torch.device("cpu"), "gemm")


def test_an_unknown_formulation_is_refused_by_name():
    with pytest.raises(ValueError, match="kernels 'fast'"):
        check_kernels("fast")


@pytest.mark.parametrize("model_name", ["resnet18", "cnn-small"])
def test_a_pinned_formulation_trains_as_vmaps_rules(model_name, monkeypatch):
    """ResNet (vmap's rules with its convolutions intercepted) and cnn-small (hand-batched)
    give vmap's own outputs and gradients under the batched-GEMM formulation. In float64
    and seeded: BatchNorm over ResNet's last 1x1 maps of 3 samples amplifies float32
    rounding past the tolerance for some draws (1 run in 7 failed unseeded)."""
    shape = (3, 16, 16) if model_name == "resnet18" else (1, 8, 8)
    model = build_model(model_name, input_shape=shape, num_classes=10, seed=0).double()
    state = ModelState.of(model)
    params, buffers = stack([state.params] * 2), stack([state.buffers] * 2)
    g = torch.Generator().manual_seed(5)
    noise = {k: torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in params.items()}
    params = {k: v + 0.01 * noise[k] for k, v in params.items()}
    x = torch.randn(2, 3, *shape, generator=g, dtype=torch.float64)

    def gradients(kernels):
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        function = ModelFunction(model, hand_batched=model_name != "resnet18", kernels=kernels)

        def loss(p, b, x):
            return function(p, {k: v.clone() for k, v in b.items()}, x)["logits"].square().mean()

        values = vmap(loss)(leaves, buffers, x)
        return values, torch.autograd.grad(values.sum(), list(leaves.values()))

    reference = gradients("auto")
    calls = []
    gemm = FORMULATIONS["gemm"]
    monkeypatch.setitem(FORMULATIONS, "gemm", lambda *args: calls.append(1) or gemm(*args))
    values, grads = gradients("gemm")
    convolutions = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    assert len(calls) == convolutions  # every convolution went through the formulation
    torch.testing.assert_close(values, reference[0], rtol=1e-5, atol=1e-6)
    for a, e in zip(grads, reference[1], strict=True):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)


def test_timing_the_formulations_works_from_inside_a_vmap():
    """The choice is timed where the layer first runs: inside the batched step's vmap."""
    chosen = []
    physical, weight = torch.randn(3, 4, 2, 5, 5), torch.randn(3, 6, 2, 3, 3)  # a stand-in

    def per_client(x, w):
        chosen.append(stacked_conv._fastest(physical, weight, None, (1, 1), (1, 1), (1, 1), 1))
        return x.sum() * w.sum()

    vmap(per_client)(torch.randn(3, 4, 2, 5, 5), torch.randn(3, 6, 2, 3, 3))
    assert chosen and chosen[0] in FORMULATIONS


def test_resnet_trains_under_bf16_with_its_convolutions_intercepted():
    """The intercepted convolution runs in bf16 under autocast but hands vmap the input's
    dtype, as vmap's own rule does: BatchNorm's rule takes no bf16 input with fp32
    statistics (this failed on an H100 and, pinned, on a CPU)."""
    from mecsim.algorithms.losses import cross_entropy_loss
    from mecsim.executors import train_batched
    from mecsim.learning.training import Schedule, SplitData

    g = torch.Generator().manual_seed(0)
    model = build_model("resnet18", input_shape=(3, 8, 8), num_classes=10, seed=0)
    x, y = torch.randn(16, 3, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)

    def mean_loss(precision):
        function = ModelFunction(model, precision=precision, kernels="gemm")
        splits = [
            {"train": SplitData(x, y, torch.arange(i * 8, i * 8 + 8), 8, torch.Generator())}
            for i in range(2)
        ]
        starts = [ModelState.of(model)] * 2
        schedule = Schedule(batch_size=8, lr=0.01)
        results = train_batched(function, starts, splits, schedule, cross_entropy_loss("train"))
        return results[0].loss

    assert mean_loss("bf16") == pytest.approx(mean_loss("fp32"), rel=0.02)


def test_the_scenario_key_offers_exactly_the_formulations():
    """``execution.kernels`` is a Literal (config imports no torch); it names MODES."""
    import typing

    from mecsim.config.sections import ExecutionConfig

    annotation = ExecutionConfig.model_fields["kernels"].annotation
    assert typing.get_args(annotation) == stacked_conv.MODES
