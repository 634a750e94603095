"""Small CNNs from the seed papers, for MNIST-like and CIFAR-like images.

Padding rule for the 5x5 CNNs (``cnn-kapc``, ``cnn-persfl``, ``cnn-comet``):
padding 0 when the smaller image side is >= 28 px, as in the papers, and
padding 2 ("same") for smaller images such as the 8x8 digits, so every CNN
runs on every image dataset. The flatten size is measured with one dummy
forward pass at build time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mecsim.learning.models.registry import MODELS, image_shape


class ConvNet(nn.Module):
    """``features`` (conv -> ReLU -> maxpool 2 per block), flatten, ``classifier`` (MLP).

    Each block pools before its ReLU: the same function with the same gradients
    (ReLU is non-decreasing, so it commutes with a max, and both orders route a
    window's gradient to its first maximum, or nowhere when that is <= 0), with
    ReLU on a quarter of the values: 6-7 % off a batched training step on a CPU.
    Module indices, hence state-dict keys, are those of conv -> ReLU -> pool.

    Args:
        input_shape: ``(C, H, W)`` of one sample.
        convs: one ``(out_channels, kernel_size, padding)`` per conv block.
        hidden: widths of the hidden fully connected layers (ReLU after each).
        num_classes: number of output logits.
        batch_norm: BatchNorm2d after each conv (before the ReLU).
    """

    def __init__(
        self,
        input_shape: tuple[int, int, int],
        convs: Sequence[tuple[int, int, int]],
        hidden: Sequence[int],
        num_classes: int,
        batch_norm: bool = False,
    ) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        channels = input_shape[0]
        for out_channels, kernel_size, padding in convs:
            conv = nn.Conv2d(channels, out_channels, kernel_size, padding=padding)
            norm = [nn.BatchNorm2d(out_channels)] if batch_norm else []
            blocks += [conv, *norm, nn.MaxPool2d(2), nn.ReLU()]  # = ReLU, then pool
            channels = out_channels
        self.features = nn.Sequential(*blocks)
        with torch.no_grad():
            width = self.features(torch.zeros(1, *input_shape)).numel()
        layers: list[nn.Module] = []
        for units in hidden:
            layers += [nn.Linear(width, units), nn.ReLU()]
            width = units
        layers.append(nn.Linear(width, num_classes))
        self.classifier = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def _padding_5x5(height: int, width: int) -> int:
    """0 for images of at least 28 px (the papers' setting), 2 for smaller ones."""
    return 0 if min(height, width) >= 28 else 2


@MODELS.register("cnn-small", "Quickstart CNN: conv3x3(16, 32) + maxpool, FC 64.")
def cnn_small(input_shape: tuple[int, ...], num_classes: int) -> ConvNet:
    """mecsim's quickstart CNN, fast on CPU for 1x8x8 digits and 1x28x28 images.

    conv3x3(16, padding 1) ReLU maxpool2, conv3x3(32, padding 1) ReLU maxpool2,
    FC 64 ReLU, FC classes.
    """
    shape = image_shape("cnn-small", input_shape)
    return ConvNet(shape, [(16, 3, 1), (32, 3, 1)], [64], num_classes)


@MODELS.register("cnn-small-bn", "cnn-small with BatchNorm after each conv.")
def cnn_small_bn(input_shape: tuple[int, ...], num_classes: int) -> ConvNet:
    """``cnn-small`` with BatchNorm2d after each conv: a fast model with running statistics."""
    shape = image_shape("cnn-small-bn", input_shape)
    return ConvNet(shape, [(16, 3, 1), (32, 3, 1)], [64], num_classes, batch_norm=True)


@MODELS.register("cnn-kapc", "KAPC's MNIST/FMNIST CNN: conv5x5(32, 64), FC 512, 128.")
def cnn_kapc(input_shape: tuple[int, ...], num_classes: int) -> ConvNet:
    """KAPC (IEEE TMC 2024, Sec. 7.1 "Model Architecture") CNN for MNIST/FMNIST.

    "2 convolutional layers with 5x5 filters followed by 3 fully connected
    layers with 512 and 128 hidden neurons": conv5x5(32), conv5x5(64), each
    ReLU + maxpool2, then FC 512, FC 128, FC classes. Padding rule: module docstring.
    """
    _, height, width = shape = image_shape("cnn-kapc", input_shape)
    pad = _padding_5x5(height, width)
    return ConvNet(shape, [(32, 5, pad), (64, 5, pad)], [512, 128], num_classes)


@MODELS.register("cnn-persfl", "PersFL's CIFAR LeNet: conv5x5(6, 16), FC 120, 84.")
def cnn_persfl(input_shape: tuple[int, ...], num_classes: int) -> ConvNet:
    """PersFL (Divi et al., Sec. 5 "Model Architecture") CIFAR-10 CNN, LeNet-style.

    conv5x5(6), conv5x5(16), each ReLU + maxpool2, then FC 120, FC 84, FC
    classes. The paper's "FC layers of 400, 120 and 84 neurons" counts the
    flattened conv output (16x5x5 = 400 on 32x32 inputs) as the first.
    Padding rule: module docstring.
    """
    _, height, width = shape = image_shape("cnn-persfl", input_shape)
    pad = _padding_5x5(height, width)
    return ConvNet(shape, [(6, 5, pad), (16, 5, pad)], [120, 84], num_classes)


@MODELS.register("cnn-comet", "COMET's CNN: conv5x5(6, 16), FC 120, 100, 84, 50.")
def cnn_comet(input_shape: tuple[int, ...], num_classes: int) -> ConvNet:
    """COMET (Cho et al., IEEE JSTSP 2023, Appendix B "Model Setup") CNN.

    "2 convolutional layers with max pooling and 4 hidden fully connected
    linear layers of units [120, 100, 84, 50]": conv5x5(6), conv5x5(16), each
    ReLU + maxpool2, then FC 120, 100, 84, 50 (ReLU) and FC classes.
    Padding rule: module docstring.
    """
    _, height, width = shape = image_shape("cnn-comet", input_shape)
    pad = _padding_5x5(height, width)
    return ConvNet(shape, [(6, 5, pad), (16, 5, pad)], [120, 100, 84, 50], num_classes)
