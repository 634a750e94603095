"""The model registry and deterministic, functional-friendly model construction.

Every entry of :data:`MODELS` is a builder ``(input_shape, num_classes) ->
nn.Module``; :func:`build_model` is the one entry point that seeds and cleans
up what a builder returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from mecsim.common.errors import ConfigError
from mecsim.common.registry import Registry

ModelBuilder = Callable[[tuple[int, ...], int], nn.Module]
"""Builds an untrained model for one sample's ``input_shape`` and ``num_classes``."""

MODELS: Registry[ModelBuilder] = Registry("model", "model.name")


class InputShapeError(ConfigError, ValueError):
    """A model cannot take the dataset's input shape (reported on ``model.name``)."""

    def __init__(self, name: str, input_shape: Sequence[int], need: str) -> None:
        super().__init__(
            "model.name", f"model {name!r} needs {need}; got input_shape {tuple(input_shape)}"
        )


def image_shape(name: str, input_shape: Sequence[int]) -> tuple[int, int, int]:
    """``input_shape`` as ``(C, H, W)``; any other rank raises :class:`InputShapeError`."""
    if len(input_shape) != 3:
        raise InputShapeError(name, input_shape, "an image input_shape (C, H, W)")
    channels, height, width = (int(n) for n in input_shape)
    return channels, height, width


def build_model(name: str, *, input_shape: Sequence[int], num_classes: int, seed: int) -> nn.Module:
    """Build the registered model ``name``, initialized from ``seed`` alone.

    Initialization draws from torch's CPU generator inside
    ``torch.random.fork_rng``, so the global RNG state is left as it was.
    Every ``inplace`` flag (ReLU, Dropout, ...) is switched off so the model
    is safe under ``torch.func.functional_call`` and ``vmap``.

    Args:
        name: registry name (``model.name``), e.g. ``"cnn-small"``.
        input_shape: one sample's shape, ``(C, H, W)`` for images or ``(features,)``.
        num_classes: number of output logits.
        seed: initialization seed (derive it with :func:`mecsim.common.rng.derive_seed`).
    """
    builder = MODELS.get(name)
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(int(seed))
        model = builder(tuple(int(n) for n in input_shape), int(num_classes))
    for module in model.modules():
        if getattr(module, "inplace", False):
            module.inplace = False
    return model
