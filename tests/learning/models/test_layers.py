"""Layers: conv/linear modules with their following normalization."""

from __future__ import annotations

import pytest
from torch import nn

from mecsim.learning.models import MODELS, Layer, build_model, layer_nbytes, model_layers

LARGE = ("resnet18", "resnet34", "vgg11", "vgg13")


@pytest.mark.parametrize("name", MODELS.names())
def test_layers_partition_parameters_and_buffers_in_order(name):
    shape = (3, 32, 32) if name in LARGE else (1, 8, 8)
    model = build_model(name, input_shape=shape, num_classes=10, seed=0)

    layers = model_layers(model)

    assert [n for layer in layers for n in layer.param_names] == [
        n for n, _ in model.named_parameters()
    ]
    assert [n for layer in layers for n in layer.buffer_names] == [
        n for n, _ in model.named_buffers()
    ]
    modules = dict(model.named_modules())
    assert all(isinstance(modules[layer.name], (nn.Conv2d, nn.Linear)) for layer in layers)


def test_cnn_kapc_has_two_conv_and_three_linear_layers():
    model = build_model("cnn-kapc", input_shape=(1, 28, 28), num_classes=10, seed=0)

    layers = model_layers(model)

    assert [layer.name for layer in layers] == [
        "features.0",
        "features.3",
        "classifier.0",
        "classifier.2",
        "classifier.4",
    ]
    assert layers[0] == Layer("features.0", ("features.0.weight", "features.0.bias"), ())


def test_resnet18_batchnorm_joins_the_preceding_conv():
    model = build_model("resnet18", input_shape=(3, 32, 32), num_classes=10, seed=0)

    layers = {layer.name: layer for layer in model_layers(model)}

    assert len(layers) == 21  # 17 convs on the main path + 3 downsample convs + fc
    assert layers["conv1"].param_names == ("conv1.weight", "bn1.weight", "bn1.bias")
    assert layers["conv1"].buffer_names == (
        "bn1.running_mean",
        "bn1.running_var",
        "bn1.num_batches_tracked",
    )
    assert layers["layer2.0.downsample.0"].param_names == (
        "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.weight",
        "layer2.0.downsample.1.bias",
    )
    assert layers["fc"].param_names == ("fc.weight", "fc.bias")


def test_layer_and_group_norm_join_their_linear_or_conv():
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4), nn.Flatten(), nn.Linear(4, 4), nn.LayerNorm(4)
    )

    layers = model_layers(model)

    assert layers == [
        Layer("0", ("0.weight", "0.bias", "1.weight", "1.bias"), ()),
        Layer("3", ("3.weight", "3.bias", "4.weight", "4.bias"), ()),
    ]


def test_layer_nbytes_counts_parameters_and_buffers():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Linear(10, 5))

    sizes = layer_nbytes(model)

    # conv 18 + 2 floats, BN 2 + 2 + 2 + 2 floats and an int64 counter; linear 50 + 5 floats
    assert sizes == [(20 + 8) * 4 + 8, 55 * 4]


def test_layer_nbytes_sum_to_the_state_size():
    model = build_model("resnet18", input_shape=(3, 32, 32), num_classes=10, seed=0)
    total = sum(t.nbytes for t in model.state_dict().values())

    assert sum(layer_nbytes(model)) == total
    assert len(layer_nbytes(model)) == len(model_layers(model))
