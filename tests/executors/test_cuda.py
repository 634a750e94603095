"""The CUDA path: runs only where a CUDA device exists (skipped elsewhere)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

import mecsim

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def full_float32(monkeypatch):
    """CUDA's convolutions and matmuls in float32, not TF32, so CPU and GPU agree closely."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)


@pytest.mark.parametrize("algorithm", ["fedavg", "scd"])
def test_batched_and_serial_on_cuda_give_the_cpu_tables(tiny, algorithm, full_float32):
    overrides = {"algorithm.name": algorithm}
    if algorithm == "scd":
        # as on the CPU (tests/executors/test_executors.py): the spectral coupling turns
        # float rounding (1e-6) into 1e-3 in the weights within a round, so the whole run
        # checks the two tasks' state flow without the terms; the terms themselves are
        # checked step by step on the GPU against the CPU in
        # tests/algorithms/test_spectral.py::test_the_spectral_loss_on_a_device_is_the_cpus
        overrides |= {"algorithm.lambda_g": 0.0, "algorithm.lambda_p": 0.0}
    cpu = mecsim.run(tiny, overrides, write=False, executor="serial")
    batched = mecsim.run(tiny, overrides, write=False, executor="batched", device="cuda")
    serial = mecsim.run(tiny, overrides, write=False, executor="serial", device="cuda")

    for result in (batched, serial):
        pd.testing.assert_frame_equal(result.events, cpu.events)  # costs depend on shapes only
        assert result.summary["device"] == "cuda"
    for name, value in serial.server_state["global"].params.items():
        torch.testing.assert_close(
            batched.server_state["global"].params[name], value, rtol=1e-4, atol=1e-5
        )
        torch.testing.assert_close(
            value.cpu(), cpu.server_state["global"].params[name], rtol=1e-4, atol=1e-5
        )


def test_auto_on_cuda_is_batched_and_sized_from_the_gpus_memory(tiny):
    result = mecsim.run(tiny, write=False, device="cuda")
    calibration = result.summary["calibration"]

    assert result.summary["executor"] == "batched" and calibration["serial_s"] is None
    free = torch.cuda.mem_get_info()[0]
    assert 0 < calibration["budget_bytes"] <= free
    assert calibration["max_clients"] == calibration["budget_bytes"] // calibration["client_bytes"]


def test_grouped_personalized_predictions_on_cuda_equal_one_at_a_time():
    from mecsim.learning.models import build_model
    from mecsim.learning.state import ModelState
    from mecsim.learning.training import predict, predict_many

    model = build_model("cnn-small-bn", input_shape=(1, 8, 8), num_classes=10, seed=0).cuda()
    base = ModelState.of(model)
    states = [
        ModelState({k: v + 0.1 * torch.rand_like(v) for k, v in base.params.items()}, base.buffers)
        for _ in range(6)
    ]
    inputs = [torch.randn(n, 1, 8, 8, device="cuda") for n in (0, 3, 9, 1, 12, 5)]

    grouped = predict_many(model, states, inputs)
    for state, x, labels in zip(states, inputs, grouped, strict=True):
        assert labels.device.type == "cuda"
        assert torch.equal(labels, predict(model, state, x))


@pytest.mark.parametrize("name", ["cnn-small-bn", "mlp"])
def test_the_hand_batched_forward_on_cuda_equals_vmap_rules(name, full_float32):
    from torch.func import vmap

    from mecsim.learning.models import build_model
    from mecsim.learning.state import ModelState, stack
    from mecsim.learning.training import ModelFunction

    model = build_model(name, input_shape=(1, 8, 8), num_classes=10, seed=0).cuda().train()
    base = ModelState.of(model)
    params = stack(
        [{k: v + 0.05 * torch.randn_like(v) for k, v in base.params.items()} for _ in range(4)]
    )
    buffers = stack([base.buffers] * 4)
    x = torch.randn(4, 6, 1, 8, 8, device="cuda")

    def run(function):
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        logits = vmap(lambda p, b, x: function(p, {k: v.clone() for k, v in b.items()}, x))(
            leaves, buffers, x
        )["logits"]
        return logits, torch.autograd.grad(logits.square().sum(), list(leaves.values()))

    hand, rules = run(ModelFunction(model)), run(ModelFunction(model, hand_batched=False))
    torch.testing.assert_close(hand[0], rules[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(hand[1], rules[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _graph_case(steps_per_client):
    """A BatchNorm CNN, clients of different lengths (several segments), momentum."""
    from mecsim.learning.models import build_model
    from mecsim.learning.state import ModelState
    from mecsim.learning.training import ModelFunction, Schedule, SplitData

    model = build_model("cnn-small-bn", input_shape=(1, 8, 8), num_classes=10, seed=0).cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    n = sum(steps_per_client) * 8
    x = torch.randn(n, 1, 8, 8, device="cuda", generator=g)
    y = torch.randint(0, 10, (n,), device="cuda", generator=g)
    bounds = [0]
    for steps in steps_per_client:
        bounds.append(bounds[-1] + steps * 8)
    splits = [
        {"train": SplitData(x, y, torch.arange(a, b, device="cuda"), 8, torch.Generator())}
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    for i, split in enumerate(splits):
        split["train"].generator.manual_seed(i)
    schedule = Schedule(epochs=1, batch_size=8, lr=0.05, momentum=0.9, weight_decay=1e-4)
    starts = [ModelState.of(model)] * len(splits)
    return ModelFunction(model), starts, splits, schedule


@pytest.mark.parametrize("syncs", [False, True], ids=["captured", "falls-back"])
def test_cuda_graph_steps_give_the_eager_steps_results(syncs, full_float32, monkeypatch):
    """Replayed steps (segments of 12, 9 and 3 steps) give the eager trainer's states and
    losses bit for bit (deterministic cuDNN algorithms, so two eager runs agree bit for
    bit too); a loss that synchronizes with the host cannot be captured and trains
    eagerly instead."""
    from mecsim.algorithms.losses import cross_entropy_loss
    from mecsim.executors import train_batched

    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    base = cross_entropy_loss("train")

    def loss(forward, params, batch, consts):
        if syncs:
            torch.cuda.synchronize()  # not allowed while a graph is being captured
        return base(forward, params, batch, consts)

    def trained(cuda_graphs):  # a fresh case each time: the batch streams are consumed
        function, starts, splits, schedule = _graph_case([12, 21, 24, 3])
        return train_batched(function, starts, splits, schedule, loss, cuda_graphs=cuda_graphs)

    eager, again, graphed = trained(False), trained(False), trained(True)
    for a, b, c in zip(eager, again, graphed, strict=True):
        assert a.steps == b.steps == c.steps and a.loss == b.loss
        difference = max(
            (v - c.state.params[k]).abs().max().item() for k, v in a.state.params.items()
        )
        assert a.loss == c.loss, f"graphed loss {c.loss} != {a.loss}, params off by {difference}"
        for name, value in a.state.params.items():
            assert torch.equal(value, b.state.params[name]), name
            assert torch.equal(value, c.state.params[name]), name
        for name, value in a.state.buffers.items():
            assert torch.equal(value, c.state.buffers[name]), name


def test_the_graphs_replay_instead_of_launching_every_kernel(monkeypatch):
    from mecsim.algorithms.losses import cross_entropy_loss
    from mecsim.executors import lockstep, train_batched

    steps = []
    original = lockstep.Lockstep.step
    monkeypatch.setattr(
        lockstep.Lockstep, "step", lambda self, i: steps.append(1) or original(self, i)
    )
    function, starts, splits, schedule = _graph_case([20, 20])
    train_batched(function, starts, splits, schedule, cross_entropy_loss("train"))
    assert len(steps) == lockstep.WARM_STEPS + 1  # two warm-up steps and the capture


@pytest.mark.parametrize("kernels", ["grouped_nhwc", "grouped_nchw", "gemm"])
def test_every_formulation_on_cuda_is_every_clients_own_convolution(kernels, full_float32):
    import torch.nn.functional as F

    from mecsim.learning.models.stacked_conv import conv_clients

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(5, 4, 16, 4, 4, device="cuda", generator=g)
    w = torch.randn(5, 32, 16, 3, 3, device="cuda", generator=g)
    b = torch.randn(5, 32, device="cuda", generator=g)
    out = conv_clients(x, w, b, (1, 1), (1, 1), (1, 1), 1, kernels)
    expected = torch.stack([F.conv2d(x[i], w[i], b[i], padding=1) for i in range(5)])
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


def test_auto_times_the_formulations_once_per_layer_shape():
    from mecsim.learning.models import stacked_conv

    x = torch.randn(7, 4, 16, 4, 4, device="cuda")
    w = torch.randn(7, 32, 16, 3, 3, device="cuda")
    before = len(stacked_conv.choices())
    for _ in range(3):
        stacked_conv.conv_clients(x, w, None, (1, 1), (1, 1), (1, 1))
    chosen = stacked_conv.choices()
    assert len(chosen) == before + 1
    assert set(chosen.values()) <= set(stacked_conv.FORMULATIONS)
