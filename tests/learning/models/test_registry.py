"""Model registry: every model builds, is seeded deterministically and is functional-friendly."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, stack_module_state, vmap

from mecsim.common.errors import UnknownNameError
from mecsim.learning.models import MODELS, InputShapeError, build_model

LARGE = ("resnet18", "resnet34", "vgg11", "vgg13")
SMALL_CNNS = ("cnn-small", "cnn-small-bn", "cnn-kapc", "cnn-persfl", "cnn-comet")


def shape_for(name: str) -> tuple[int, int, int]:
    """A fast input that suits the model: CIFAR-sized for the big ones, 8x8 digits otherwise."""
    return (3, 32, 32) if name in LARGE else (1, 8, 8)


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters()) | dict(model.named_buffers())


def test_all_expected_models_are_registered():
    expected = {"mlp", "dnn-100", *SMALL_CNNS, *LARGE}

    assert set(MODELS.names()) == expected
    assert all(MODELS.describe().values())


@pytest.mark.parametrize("name", MODELS.names())
def test_model_maps_a_batch_to_logits(name):
    shape = shape_for(name)
    model = build_model(name, input_shape=shape, num_classes=7, seed=0)

    logits = model(torch.randn(2, *shape))

    assert logits.shape == (2, 7)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28), (3, 32, 32)])
@pytest.mark.parametrize("name", SMALL_CNNS)
def test_small_cnns_run_on_every_image_size(name, shape):
    model = build_model(name, input_shape=shape, num_classes=10, seed=0)

    logits = model(torch.zeros(2, *shape))

    assert logits.shape == (2, 10)


@pytest.mark.parametrize("name", ["vgg11", "resnet18"])
def test_large_models_also_run_on_small_images(name):
    model = build_model(name, input_shape=(1, 28, 28), num_classes=10, seed=0).eval()

    logits = model(torch.zeros(1, 1, 28, 28))

    assert logits.shape == (1, 10)


def test_5x5_cnns_follow_the_papers_on_32px_and_28px_inputs():
    persfl = build_model("cnn-persfl", input_shape=(3, 32, 32), num_classes=10, seed=0)
    kapc = build_model("cnn-kapc", input_shape=(1, 28, 28), num_classes=10, seed=0)

    assert persfl.features[0].padding == (0, 0)
    assert [m.out_features for m in persfl.classifier if isinstance(m, torch.nn.Linear)] == [
        120,
        84,
        10,
    ]
    assert persfl.classifier[0].in_features == 400  # PersFL's "400" FC layer
    assert kapc.classifier[0].in_features == 64 * 4 * 4
    assert [m.out_features for m in kapc.classifier if isinstance(m, torch.nn.Linear)] == [
        512,
        128,
        10,
    ]


def test_cifar_stem_and_head():
    resnet = build_model("resnet18", input_shape=(1, 32, 32), num_classes=10, seed=0)
    vgg = build_model("vgg11", input_shape=(1, 32, 32), num_classes=10, seed=0)

    assert resnet.conv1.in_channels == 1
    assert resnet.conv1.kernel_size == (3, 3) and resnet.conv1.stride == (1, 1)
    assert resnet.conv1.bias is None
    assert isinstance(resnet.maxpool, torch.nn.Identity)
    assert vgg.features[0].in_channels == 1
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in vgg.features)
    assert vgg.classifier.in_features == 512 and vgg.classifier.out_features == 10


def test_mlp_takes_tabular_input():
    model = build_model("mlp", input_shape=(20,), num_classes=3, seed=0)

    logits = model(torch.randn(5, 20))

    assert logits.shape == (5, 3)


@pytest.mark.parametrize("name", MODELS.names())
def test_no_module_works_in_place(name):
    model = build_model(name, input_shape=shape_for(name), num_classes=10, seed=0)

    in_place = [n for n, m in model.named_modules() if getattr(m, "inplace", False)]

    assert in_place == []


@pytest.mark.parametrize("name", MODELS.names())
def test_same_seed_same_parameters_other_seed_different(name):
    shape = shape_for(name)

    first = state_of(build_model(name, input_shape=shape, num_classes=10, seed=1))
    again = state_of(build_model(name, input_shape=shape, num_classes=10, seed=1))
    other = state_of(build_model(name, input_shape=shape, num_classes=10, seed=2))

    assert all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)


def test_building_leaves_global_rng_state_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()

    build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=5)
    build_model("resnet18", input_shape=(3, 32, 32), num_classes=10, seed=5)

    assert torch.equal(torch.random.get_rng_state(), before)


def test_unknown_model_names_the_field():
    with pytest.raises(UnknownNameError) as info:
        build_model("lenet-9000", input_shape=(1, 8, 8), num_classes=10, seed=0)

    assert "model.name" in str(info.value)
    assert "lenet-9000" in str(info.value)
    assert "cnn-small" in str(info.value)  # lists what is allowed


@pytest.mark.parametrize("name", ["cnn-kapc", "resnet18", "vgg11"])
def test_image_models_reject_tabular_input(name):
    with pytest.raises(ValueError, match="model.name") as info:
        build_model(name, input_shape=(64,), num_classes=10, seed=0)

    assert isinstance(info.value, InputShapeError)
    assert name in str(info.value)


def test_functional_call_matches_the_module():
    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    x = torch.randn(4, 1, 8, 8)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}

    out = functional_call(model, (params, dict(model.named_buffers())), (x,))

    torch.testing.assert_close(out, model(x))


def test_functional_call_updates_passed_batchnorm_stats_in_train_mode():
    model = build_model("resnet18", input_shape=(3, 32, 32), num_classes=10, seed=0).train()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    buffers = {k: v.clone() for k, v in model.named_buffers()}

    functional_call(model, (params, buffers), (torch.randn(2, 3, 32, 32),))

    assert buffers["bn1.num_batches_tracked"].item() == 1
    assert not torch.equal(buffers["bn1.running_mean"], model.bn1.running_mean)
    assert model.bn1.num_batches_tracked.item() == 0  # the module's own stats are untouched


def test_vmap_over_stacked_clients_updates_each_clients_stats():
    models = [
        build_model("resnet18", input_shape=(3, 32, 32), num_classes=10, seed=s) for s in range(3)
    ]
    params, buffers = stack_module_state(models)
    x = torch.randn(3, 2, 3, 32, 32)

    def forward(p, b, xb):
        return functional_call(models[0], (p, b), (xb,))

    out = vmap(forward)(params, buffers, x)

    assert out.shape == (3, 2, 10)
    assert buffers["bn1.num_batches_tracked"].tolist() == [1, 1, 1]
    expected = functional_call(
        models[1], dict(models[1].named_parameters()) | dict(models[1].named_buffers()), (x[1],)
    )
    torch.testing.assert_close(out[1], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["cnn-small", "cnn-small-bn", "cnn-kapc", "cnn-persfl"])
def test_cnn_blocks_compute_conv_relu_pool_with_the_same_gradients(name):
    """Blocks pool before their ReLU; outputs and gradients equal the papers' order bit for
    bit, ties in a pooling window and windows without a positive value included."""
    from torch import nn

    model = build_model(name, input_shape=(1, 16, 16), num_classes=10, seed=0)
    x = torch.randn(6, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    x[:, :, :6, :6] = 0.0  # flat regions: exact ties of the first conv's outputs
    x[:2] = -x[:2].abs()  # mostly non-positive responses

    def papers_order(x):
        modules = list(model.features)
        for i, module in enumerate(modules):
            if isinstance(module, nn.MaxPool2d):
                continue
            x = module(x)
            if isinstance(module, nn.ReLU):
                x = modules[i - 1](x)  # the pool that precedes it, after it
        return model.classifier(torch.flatten(x, 1))

    model.train()
    ours, theirs = model(x), papers_order(x)
    assert torch.equal(ours, theirs)
    weights = list(model.parameters())
    grads = [torch.autograd.grad(out.square().sum(), weights) for out in (ours, theirs)]
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def test_persfls_mnist_dnn_has_one_hidden_layer_of_100_units():
    from mecsim.learning.models import build_model

    model = build_model("dnn-100", input_shape=(1, 28, 28), num_classes=10, seed=0)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(784, 100), (100, 10)]
    assert sum(p.numel() for p in model.parameters()) == 784 * 100 + 100 + 100 * 10 + 10
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
