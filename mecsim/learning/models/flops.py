"""FLOP counting: a dispatch-mode counter, and forward FLOPs per sample per architecture.

:class:`FlopCount` counts exactly what ``torch.utils.flop_counter.FlopCounterMode``
counts (it uses torch's own formula registry and the same decomposition
rule) but keeps no per-module breakdown, and does not import ``torch._dynamo``:
``FlopCounterMode`` wraps its dispatch in a Dynamo guard that imports it on
first use, 0.8 s of every run's start-up. A test checks both agree on a
training step of every registered model.

Importing torch's formula registry imports Triton (65 ms of start-up) only to
name the class of Triton kernels in a type check; :func:`_flop_registry` imports
it with Triton held back and puts a class in that check that recognizes Triton
kernels once Triton is loaded, so torch behaves as before.
"""

from __future__ import annotations

import copy
import logging
import sys
from collections.abc import Hashable, Sequence
from itertools import chain
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mecsim.learning.models.elementwise import (
    elementwise_flops,
    op_name,
    transform_flops,
)


class _TritonKernelType(type):
    def __instancecheck__(cls, obj: object) -> bool:
        jit = sys.modules.get("triton.runtime.jit")  # a Triton kernel exists only if it is loaded
        return jit is not None and isinstance(obj, jit.JITFunction)


class _TritonKernel(metaclass=_TritonKernelType):
    """Stands for ``triton.runtime.jit.JITFunction`` without importing Triton."""


def _flop_registry() -> dict[Any, Any]:
    """torch's FLOP formula registry, imported without importing Triton."""
    if "torch.utils.flop_counter" in sys.modules or "triton" in sys.modules:
        from torch.utils.flop_counter import flop_registry

        return flop_registry
    counter_log = logging.getLogger("torch.utils.flop_counter")
    disabled = counter_log.disabled  # silence its "triton not found" warning
    sys.modules["triton"] = None  # type: ignore[assignment]  # makes `import triton` fail fast
    counter_log.disabled = True
    try:
        import torch.utils.flop_counter as flop_counter
    finally:
        del sys.modules["triton"]
        counter_log.disabled = disabled
    flop_counter._JITFunction = _TritonKernel  # what the import would have bound with Triton
    return flop_counter.flop_registry


flop_registry = _flop_registry()

_CACHE: dict[Hashable, int] = {}

_aten, _prim = torch.ops.aten, torch.ops.prim
_METADATA_QUERIES = frozenset(
    {
        _aten.sym_is_contiguous.default,
        _aten.is_contiguous.default,
        _aten.is_contiguous.memory_format,
        _aten.is_strides_like_format.default,
        _aten.is_non_overlapping_and_dense.default,
        _aten.size.default,
        _aten.sym_size.default,
        _aten.stride.default,
        _aten.sym_stride.default,
        _aten.storage_offset.default,
        _aten.sym_storage_offset.default,
        _aten.numel.default,
        _aten.sym_numel.default,
        _aten.dim.default,
        _prim.layout.default,
    }
)
"""Ops that ask about a tensor's layout: left to the default handling, as FlopCounterMode does."""


class FlopCount(TorchDispatchMode):
    """Context manager: ``total`` FLOPs of the matrix products and convolutions run inside.

    Counted as ``FlopCounterMode`` counts them (multiply and add apart, so a
    ``Linear(10, 5)`` on one sample is 100): an op without a formula is first
    decomposed, if it can be, and its parts counted. FFTs and vector products
    are counted too (:func:`~mecsim.learning.models.elementwise.transform_flops`).

    With ``trace``, every other op is also written to ``ops`` as
    :class:`TracedOp` (its element-wise price by
    :func:`~mecsim.learning.models.elementwise.elementwise_flops`, and the element counts
    of its tensors), for :class:`~mecsim.learning.cost.StepMeter` to tell weight-space
    work from per-sample work.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # no Dynamo guard around __torch_dispatch__: nothing here is compiled

    def __init__(self, trace: bool = False) -> None:
        super().__init__()
        self.total = 0
        self.trace = trace
        self.ops: list[TracedOp] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _METADATA_QUERIES or isinstance(func, torch._ops.HigherOrderOperator):
            return NotImplemented
        if func not in flop_registry and func is not _prim.device.default:
            with self:
                decomposed = func.decompose(*args, **kwargs)
                if decomposed is not NotImplemented:
                    return decomposed
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        elif (transform := transform_flops(func, args, kwargs, out)) is not None:
            self.total += transform
        elif self.trace:
            sizes = tuple(t.numel() for t in tree_leaves((args, kwargs, out)) if _is_tensor(t))
            cost = elementwise_flops(func, args, kwargs, out)
            self.ops.append(TracedOp(op_name(func), sizes, cost or 0, cost is not None))
        return out


class TracedOp(NamedTuple):
    """One op of a traced count: its name, its tensors' element counts (inputs, then
    outputs), its element-wise FLOPs and whether a rule priced it (else it moves data)."""

    name: str
    sizes: tuple[int, ...]
    flops: int
    priced: bool


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


def _architecture_key(model: nn.Module, input_shape: tuple[int, ...]) -> Hashable:
    """Class, module tree (``repr``), tensor names/shapes/dtypes and input shape."""
    tensors = tuple(
        (name, tuple(t.shape), str(t.dtype))
        for name, t in chain(model.named_parameters(), model.named_buffers())
    )
    return type(model).__qualname__, repr(model), tensors, input_shape


def forward_flops_per_sample(model: nn.Module, input_shape: Sequence[int]) -> int:
    """Forward-pass FLOPs (multiply and add counted apart) for one sample of ``input_shape``.

    Counted by :class:`FlopCount` on a deep copy in eval mode under
    ``no_grad`` with a batch of one zero sample, on the model's device and
    dtype; ``model`` itself is untouched. Matrix products and convolutions
    are counted (a ``Linear(10, 5)`` is 2 x 10 x 5 = 100 FLOPs; bias adds,
    activations and normalizations are not). The result is cached per
    architecture and input shape.
    """
    shape = tuple(int(n) for n in input_shape)
    key = _architecture_key(model, shape)
    if key not in _CACHE:
        probe = copy.deepcopy(model).eval()
        reference = next(chain(probe.parameters(), probe.buffers()), None)
        device = reference.device if reference is not None else torch.device("cpu")
        dtype = reference.dtype if reference is not None and reference.is_floating_point() else None
        x = torch.zeros(1, *shape, device=device, dtype=dtype)
        with torch.no_grad(), FlopCount() as counter:
            probe(x)
        _CACHE[key] = counter.total
    return _CACHE[key]
