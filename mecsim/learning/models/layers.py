"""A model's layers: each conv/linear with the normalization that follows it.

Layer-wise algorithms (KAPC's parameter coaching and bidirectional layer
selection, layer-selective upload) and per-layer byte counts work on these
groups of parameter and buffer names.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

WEIGHTED = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
"""Modules that start a new layer."""

NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)
"""Normalizations whose parameters and buffers join the preceding layer."""


@dataclass(frozen=True)
class Layer:
    """One layer: full dotted names as in ``named_parameters()`` / ``named_buffers()``.

    ``name`` is the conv/linear module's dotted name (e.g. ``"layer1.0.conv1"``).
    """

    name: str
    param_names: tuple[str, ...]
    buffer_names: tuple[str, ...]


def model_layers(model: nn.Module) -> list[Layer]:
    """The model's layers in module registration order.

    Each Conv/Linear starts a layer owning its weight and bias; a following
    normalization module (BatchNorm, GroupNorm, LayerNorm, InstanceNorm)
    adds its affine parameters and running statistics to the layer before it.
    Any other module holding tensors (or a normalization with no layer
    before it) forms a layer of its own, so every parameter and buffer
    belongs to exactly one layer.
    """
    groups: list[tuple[str, list[str], list[str]]] = []
    for name, module in model.named_modules():
        params = [n for n, _ in module.named_parameters(prefix=name, recurse=False)]
        buffers = [n for n, _ in module.named_buffers(prefix=name, recurse=False)]
        if isinstance(module, NORMS) and groups:
            groups[-1][1].extend(params)
            groups[-1][2].extend(buffers)
        elif isinstance(module, WEIGHTED) or params or buffers:
            groups.append((name, params, buffers))
    return [Layer(name, tuple(params), tuple(buffers)) for name, params, buffers in groups]


def layer_nbytes(model: nn.Module) -> list[int]:
    """Bytes of each layer of :func:`model_layers` (parameters plus buffers)."""
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    return [
        sum(tensors[n].nbytes for n in layer.param_names + layer.buffer_names)
        for layer in model_layers(model)
    ]
