"""Multi-layer perceptron for image or tabular inputs."""

from __future__ import annotations

import math

from torch import nn

from mecsim.learning.models.registry import MODELS


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


@MODELS.register(
    "dnn-100", "PersFL's MNIST DNN (paper 002, Sec. 5): flatten -> 100 -> classes, ReLU."
)
def dnn_100(input_shape: tuple[int, ...], num_classes: int) -> nn.Sequential:
    """Two layers: one hidden layer of 100 units with ReLU, then the output layer (as
    pFedMe's MNIST model, which PersFL follows)."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), 100),
        nn.ReLU(),
        nn.Linear(100, num_classes),
    )
