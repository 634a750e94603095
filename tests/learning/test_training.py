import pytest
import torch
from torch import nn

from mecsim.algorithms.losses import cross_entropy_loss
from mecsim.learning.state import ModelState
from mecsim.learning.training import (
    ModelFunction,
    Schedule,
    SplitData,
    batch_order,
    sgd_update_,
    train,
)


def fit(model, start, x, y, indices, schedule, generator, loss=None, consts=None):
    """The shared trainer on one training split (the old positional form)."""
    split = SplitData(x, y, indices, schedule.batch_size, generator)
    return train(
        ModelFunction(model),
        start,
        {"train": split},
        schedule,
        loss or cross_entropy_loss("train"),
        consts,
    )


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)


def test_functional_sgd_matches_torch_optim_sgd():
    model = small_model()
    x, y = data()
    indices = torch.arange(40)
    schedule = Schedule(epochs=2, batch_size=8, lr=0.1, momentum=0.9, weight_decay=1e-3)
    order = batch_order(40, schedule.num_steps(40), 8, torch.Generator().manual_seed(5))

    result = fit(
        model, ModelState.of(model), x, y, indices, schedule, torch.Generator().manual_seed(5)
    )

    reference = small_model()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    reference.train()
    for positions in order:
        optimizer.zero_grad()
        nn.functional.cross_entropy(reference(x[positions]), y[positions]).backward()
        optimizer.step()
    assert result.steps == len(order) == 10
    for name, p in reference.named_parameters():
        torch.testing.assert_close(result.state.params[name], p.detach(), rtol=1e-5, atol=1e-6)
    for name, b in reference.named_buffers():
        torch.testing.assert_close(result.state.buffers[name], b)


def test_training_does_not_touch_the_input_state_or_template():
    model = small_model()
    start = ModelState.of(model)
    before = start.clone()
    x, y = data()

    fit(model, start, x, y, torch.arange(40), Schedule(steps=3), torch.Generator().manual_seed(0))

    for name in before.params:
        assert torch.equal(start.params[name], before.params[name])
        assert torch.equal(dict(model.named_parameters())[name].detach(), before.params[name])


def test_steps_override_epochs_and_trainable_freezes_the_rest():
    model = small_model()
    x, y = data()
    schedule = Schedule(
        epochs=5, steps=7, batch_size=8, trainable=frozenset({"3.weight", "3.bias"})
    )

    result = fit(
        model,
        ModelState.of(model),
        x,
        y,
        torch.arange(40),
        schedule,
        torch.Generator().manual_seed(0),
    )

    assert result.steps == 7 and result.samples == 7 * 8
    start = ModelState.of(model)
    assert torch.equal(result.state.params["0.weight"], start.params["0.weight"])
    assert not torch.equal(result.state.params["3.weight"], start.params["3.weight"])


def test_a_loss_with_a_proximal_term_changes_the_result():
    model = small_model()
    x, y = data()
    start = ModelState.of(model)
    anchor = {k: torch.zeros_like(v) for k, v in start.params.items()}

    def pull_to_zero(forward, params, batch, consts):
        ce = cross_entropy_loss("train")(forward, params, batch, consts)
        return ce + 10.0 * sum((params[k] - consts[k]).pow(2).sum() for k in consts)

    plain = fit(
        model, start, x, y, torch.arange(40), Schedule(steps=5), torch.Generator().manual_seed(0)
    )
    pulled = fit(
        model,
        start,
        x,
        y,
        torch.arange(40),
        Schedule(steps=5),
        torch.Generator().manual_seed(0),
        pull_to_zero,
        anchor,
    )

    norm = lambda s: sum(p.norm() ** 2 for p in s.params.values())  # noqa: E731
    assert norm(pulled.state) < norm(plain.state)


def test_batch_order_is_seeded_full_sized_and_covers_each_pass():
    steps = Schedule(epochs=2, batch_size=4).num_steps(10)
    a = batch_order(10, steps, 4, torch.Generator().manual_seed(1))
    b = batch_order(10, steps, 4, torch.Generator().manual_seed(1))

    assert torch.equal(a, b)
    assert a.shape == (6, 4)  # 2 epochs x ceil(10 / 4) steps, every batch full
    stream = a.flatten().tolist()
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:20]) == list(range(10))


def test_batch_order_uses_all_samples_when_fewer_than_a_batch():
    order = batch_order(3, 4, 3, torch.Generator().manual_seed(0))

    assert order.shape == (4, 3)
    assert all(sorted(row.tolist()) == [0, 1, 2] for row in order)


def test_a_diverging_learning_rate_stops_the_run_naming_round_client_and_setting(
    tiny, tmp_path, capsys
):
    import tomli_w

    from mecsim.commands.cli import main

    tiny["algorithm"].update(lr=100.0, momentum=0.99, steps=10)  # the largest lr allowed
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))

    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "algorithm.lr" in err and "round 0" in err and "client" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def reference_sgd(params, grads, momentum_buffers, schedule):
    """One SGD step out of place, written the plain way: the rounding to match."""
    new_params, new_buffers = dict(params), dict(momentum_buffers)
    for name, grad in grads.items():
        p = params[name]
        if schedule.weight_decay:
            grad = grad + schedule.weight_decay * p
        if schedule.momentum:
            previous = momentum_buffers.get(name)
            grad = grad if previous is None else schedule.momentum * previous + grad
            new_buffers[name] = grad
        new_params[name] = p - schedule.lr * grad
    return new_params, new_buffers


@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.5, 1e-3)])
def test_sgd_in_place_rounds_as_plain_sgd_matches_torch_and_leaves_gradients_alone(
    momentum, weight_decay
):
    g = torch.Generator().manual_seed(3)
    schedule = Schedule(lr=0.1, momentum=momentum, weight_decay=weight_decay)
    params = {"w": torch.randn(4, 3, generator=g), "b": torch.randn(3, generator=g)}
    owned = {k: v.clone() for k, v in params.items()}
    torch_params = [v.clone().requires_grad_(True) for v in params.values()]
    optimizer = torch.optim.SGD(torch_params, lr=0.1, momentum=momentum, weight_decay=weight_decay)
    expected_momentum: dict = {}
    momentum_buffers: dict = {}
    for _ in range(3):
        grads = {k: torch.randn(v.shape, generator=g) for k, v in params.items()}
        kept = {k: v.clone() for k, v in grads.items()}
        params, expected_momentum = reference_sgd(params, grads, expected_momentum, schedule)
        momentum_buffers = sgd_update_(owned, grads, momentum_buffers, schedule)
        for p, grad in zip(torch_params, grads.values(), strict=True):
            p.grad = grad.clone()
        optimizer.step()
        for k in params:
            assert torch.equal(owned[k], params[k])  # bit for bit
            assert torch.equal(grads[k], kept[k])  # a gradient may be a loss constant
        for p, value in zip(torch_params, owned.values(), strict=True):
            torch.testing.assert_close(p.detach(), value)  # torch's (fused) rounding aside
        assert momentum_buffers.keys() == expected_momentum.keys()
        for k in expected_momentum:
            assert torch.equal(momentum_buffers[k], expected_momentum[k])


def test_training_leaves_the_start_state_alone():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    state = ModelState.of(model)
    before = {k: v.clone() for k, v in state.params.items()}
    x, y = torch.randn(12, 4), torch.randint(0, 3, (12,))
    split = SplitData(x, y, torch.arange(12), 4, torch.Generator().manual_seed(0))
    schedule = Schedule(epochs=2, batch_size=4, lr=0.5, momentum=0.9)
    result = train(
        ModelFunction(model), state, {"train": split}, schedule, cross_entropy_loss("train")
    )
    assert result.steps == 6
    for k, v in state.params.items():
        assert torch.equal(v, before[k])  # trained in place on copies only
        assert not torch.equal(result.state.params[k], v)
        assert not result.state.params[k].requires_grad


def test_a_step_correction_moves_the_weights_outside_the_momentum_buffer():
    """K steps of a zero loss with momentum 0.9 and a constant correction d move the
    weights by exactly K * lr * d: as a loss term, momentum made it 3.6x that at K = 8."""
    from mecsim.learning.training import STEP_CORRECTION

    model = torch.nn.Linear(3, 2)
    state = ModelState.of(model)
    correction = {k: torch.full_like(v, 0.5) for k, v in state.params.items()}
    consts = {STEP_CORRECTION + k: v for k, v in correction.items()}
    x = torch.randn(16, 3)
    labels, generator = torch.zeros(16, dtype=torch.long), torch.Generator().manual_seed(0)
    splits = {"train": SplitData(x, labels, torch.arange(16), 2, generator)}
    schedule = Schedule(steps=8, batch_size=2, lr=0.1, momentum=0.9)

    def zero_loss(forward, params, batch, consts):
        return sum((p * 0).sum() for p in params.values())

    result = train(ModelFunction(model), state, splits, schedule, zero_loss, consts)
    for k, start in state.params.items():
        torch.testing.assert_close(result.state.params[k], start - 8 * 0.1 * correction[k])


def test_gradient_clipping_is_torchs_clip_grad_norm_alone_and_per_client_when_stacked():
    from mecsim.learning.training import clip_gradients

    torch.manual_seed(0)
    grads = {"w": torch.randn(4, 3) * 10, "b": torch.randn(3) * 10}
    reference = [g.clone().requires_grad_(True) for g in grads.values()]
    for r, g in zip(reference, grads.values(), strict=True):
        r.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(reference, 1.5)
    clipped = clip_gradients(grads, 1.5)
    for r, k in zip(reference, grads, strict=True):
        torch.testing.assert_close(clipped[k], r.grad)
    assert not torch.equal(clipped["w"], grads["w"])  # new tensors; the input is untouched
    small = {k: v / 1000 for k, v in grads.items()}  # under the norm: unchanged
    for k, v in clip_gradients(small, 1.5).items():
        torch.testing.assert_close(v, small[k])
    stacked = {k: torch.stack([v, v / 1000]) for k, v in grads.items()}  # two clients
    per_client = clip_gradients(stacked, 1.5, stacked=True)
    for k in grads:
        torch.testing.assert_close(per_client[k][0], clipped[k])
        torch.testing.assert_close(per_client[k][1], small[k])
