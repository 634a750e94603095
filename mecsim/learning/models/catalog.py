"""The architectures of a run and which client has which.

A run may mix architectures (``model.name`` a choice): each client has one,
and everything keyed by architecture (the initial state, layer groups, head
and normalization keys, per-sample FLOPs) is looked up here.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from mecsim.learning.models.layers import NORMS, Layer, model_layers
from mecsim.learning.state import ModelState


@dataclass(frozen=True)
class Architecture:
    """One architecture of a run: its template, initial state and layer groups."""

    name: str
    module: nn.Module
    initial: ModelState
    layers: tuple[Layer, ...]
    norm_keys: frozenset[str]
    """Parameters and buffers of normalization modules (BatchNorm, GroupNorm, ...)."""

    @classmethod
    def of(cls, name: str, module: nn.Module) -> Architecture:
        norm = {
            f"{prefix}.{n}" if prefix else n
            for prefix, m in module.named_modules()
            if isinstance(m, NORMS)
            for n, _ in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]
        }
        return cls(
            name, module, ModelState.of(module), tuple(model_layers(module)), frozenset(norm)
        )

    @property
    def head(self) -> Layer:
        """The classifier head: the last layer group."""
        return self.layers[-1]

    def layer_keys(self, layers: Sequence[Layer]) -> tuple[str, ...]:
        """Parameter and buffer names of ``layers``, in model order."""
        wanted = {n for layer in layers for n in (*layer.param_names, *layer.buffer_names)}
        return tuple(k for k in self.initial.to_payload() if k in wanted)

    @property
    def head_keys(self) -> tuple[str, ...]:
        return self.layer_keys([self.head])

    @property
    def body_keys(self) -> tuple[str, ...]:
        return self.layer_keys(self.layers[:-1])

    def num_params(self) -> int:
        return self.initial.num_params()

    def reinitialized(self, seed: int) -> ModelState:
        """Another initial state of this architecture: every module's
        ``reset_parameters`` drawn on the CPU from ``seed`` (so any device gets the
        same values), then moved to the initial state's device. On the meta
        device (cost-only runs) there are no values to draw: a copy of the shapes."""
        device = next(iter(self.initial.params.values())).device
        if device.type == "meta":
            return self.initial.clone()
        module = copy.deepcopy(self.module).to("cpu")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for submodule in module.modules():
                reset = getattr(submodule, "reset_parameters", None)
                if callable(reset):
                    reset()
        state = ModelState.of(module)
        return ModelState(
            {k: v.detach().to(device) for k, v in state.params.items()},
            {k: v.to(device) for k, v in state.buffers.items()},
        )


@dataclass(frozen=True)
class ModelCatalog:
    """Every architecture of a run and each client's architecture name.

    ``default`` is the architecture of server-side (global) models: the
    first one named in ``model.name``.
    """

    architectures: dict[str, Architecture]
    client_arch: tuple[str, ...]
    default_name: str

    @property
    def default(self) -> Architecture:
        return self.architectures[self.default_name]

    def of(self, client: int) -> Architecture:
        """The architecture of ``client`` (the default one for the server, client < 0)."""
        if client < 0:
            return self.default
        return self.architectures[self.client_arch[client]]

    @property
    def heterogeneous(self) -> bool:
        return len(set(self.client_arch)) > 1
