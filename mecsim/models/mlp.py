"""Multi-layer perceptron for image or tabular inputs."""

from __future__ import annotations

import math

from torch import nn

from mecsim.models.registry import MODELS


@MODELS.register("mlp", "MLP: flatten -> 200 -> 200 -> classes, ReLU (images or tabular).")
def mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Sequential:
    """Flatten, two hidden layers of 200 units with ReLU, then the output layer."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), 200),
        nn.ReLU(),
        nn.Linear(200, 200),
        nn.ReLU(),
        nn.Linear(200, num_classes),
    )
