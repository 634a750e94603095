"""torchvision ResNets and VGGs adapted to CIFAR-sized images and any channel count.

ResNet-18/34 (He et al., CVPR 2016) with the CIFAR stem used by KAPC (IEEE
TMC 2024, Sec. 7.1) for CIFAR-10/100; VGG-11/13 with BatchNorm, the models of
COMET (Cho et al., IEEE JSTSP 2023, Sec. V), with a CIFAR-style head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from mecsim.learning.models.registry import MODELS, image_shape

if TYPE_CHECKING:  # torchvision is imported when a model is built: it costs ~1 s at start-up
    from torchvision.models import ResNet


def _cifar_resnet(name: str, input_shape: tuple[int, ...], num_classes: int) -> ResNet:
    """torchvision ResNet with conv1 = 3x3 stride 1 (no bias) on C channels, no stem maxpool."""
    import torchvision.models

    channels, _, _ = image_shape(name, input_shape)
    model = getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    model.maxpool = nn.Identity()
    return model


@MODELS.register("resnet18", "ResNet-18, CIFAR stem (3x3 conv1, no maxpool).")
def cifar_resnet18(input_shape: tuple[int, ...], num_classes: int) -> ResNet:
    """torchvision ResNet-18 with the CIFAR stem: 3x3 stride-1 conv1 and no stem maxpool."""
    return _cifar_resnet("resnet18", input_shape, num_classes)


@MODELS.register("resnet34", "ResNet-34, CIFAR stem (3x3 conv1, no maxpool).")
def cifar_resnet34(input_shape: tuple[int, ...], num_classes: int) -> ResNet:
    """torchvision ResNet-34 with the CIFAR stem: 3x3 stride-1 conv1 and no stem maxpool."""
    return _cifar_resnet("resnet34", input_shape, num_classes)


class CifarVGG(nn.Module):
    """VGG with BatchNorm: torchvision's ``vgg*_bn`` features, then global average pool and one FC.

    The head differs from torchvision's (7x7 average pool, FC 4096, 4096): as
    usual for 32x32 inputs, the 512 final channels are averaged to 1x1 and fed
    to a single ``Linear(512, num_classes)``. The first conv takes C input
    channels. Max-pools that would shrink a side below 1 px (5 pools on a
    28 px or 8 px image) are replaced by ``nn.Identity``, so every image
    dataset fits; on 32x32 inputs the network is the standard one.

    Args:
        config: torchvision's layer config (``cfgs["A"]`` is VGG-11, ``"B"`` VGG-13).
        input_shape: ``(C, H, W)`` of one sample.
        num_classes: number of output logits.
    """

    def __init__(
        self, config: list[int | str], input_shape: tuple[int, int, int], num_classes: int
    ) -> None:
        super().__init__()
        channels, height, width = input_shape
        from torchvision.models.vgg import make_layers

        features = make_layers(config, batch_norm=True)
        features[0] = nn.Conv2d(channels, features[0].out_channels, kernel_size=3, padding=1)
        for index, module in enumerate(features):
            if isinstance(module, nn.MaxPool2d):
                if min(height, width) < 2:
                    features[index] = nn.Identity()
                else:
                    height, width = height // 2, width // 2
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(512, num_classes)
        for module in self.modules():  # torchvision's VGG initialization
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


@MODELS.register("vgg11", "VGG-11 with BatchNorm, CIFAR head (global avg pool, FC 512).")
def vgg11(input_shape: tuple[int, ...], num_classes: int) -> CifarVGG:
    """VGG-11 (torchvision ``vgg11_bn`` features) with the CIFAR head of :class:`CifarVGG`."""
    from torchvision.models.vgg import cfgs

    return CifarVGG(cfgs["A"], image_shape("vgg11", input_shape), num_classes)


@MODELS.register("vgg13", "VGG-13 with BatchNorm, CIFAR head (global avg pool, FC 512).")
def vgg13(input_shape: tuple[int, ...], num_classes: int) -> CifarVGG:
    """VGG-13 (torchvision ``vgg13_bn`` features) with the CIFAR head of :class:`CifarVGG`."""
    from torchvision.models.vgg import cfgs

    return CifarVGG(cfgs["B"], image_shape("vgg13", input_shape), num_classes)
