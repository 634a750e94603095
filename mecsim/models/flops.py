"""Forward FLOPs per sample, counted once per architecture."""

from __future__ import annotations

import copy
from collections.abc import Hashable, Sequence
from itertools import chain

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

_CACHE: dict[Hashable, int] = {}


def _architecture_key(model: nn.Module, input_shape: tuple[int, ...]) -> Hashable:
    """Class, module tree (``repr``), tensor names/shapes/dtypes and input shape."""
    tensors = tuple(
        (name, tuple(t.shape), str(t.dtype))
        for name, t in chain(model.named_parameters(), model.named_buffers())
    )
    return type(model).__qualname__, repr(model), tensors, input_shape


def forward_flops_per_sample(model: nn.Module, input_shape: Sequence[int]) -> int:
    """Forward-pass FLOPs (multiply and add counted apart) for one sample of ``input_shape``.

    Counted by ``torch.utils.flop_counter.FlopCounterMode`` on a deep copy in
    eval mode under ``no_grad`` with a batch of one zero sample, on the
    model's device and dtype; ``model`` itself is untouched. Matrix products
    and convolutions are counted (a ``Linear(10, 5)`` is 2 x 10 x 5 = 100
    FLOPs; bias adds, activations and normalizations are not). The result is
    cached per architecture and input shape.
    """
    shape = tuple(int(n) for n in input_shape)
    key = _architecture_key(model, shape)
    if key not in _CACHE:
        probe = copy.deepcopy(model).eval()
        reference = next(chain(probe.parameters(), probe.buffers()), None)
        device = reference.device if reference is not None else torch.device("cpu")
        dtype = reference.dtype if reference is not None and reference.is_floating_point() else None
        x = torch.zeros(1, *shape, device=device, dtype=dtype)
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            probe(x)
        _CACHE[key] = int(counter.get_total_flops())
    return _CACHE[key]
