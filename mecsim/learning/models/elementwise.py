"""FLOPs of the operations torch's formula registry leaves out: element-wise work.

``torch.utils.flop_counter`` has formulas for matrix products and
convolutions only. :func:`elementwise_flops` prices one dispatched operation
by what it is, read from torch's own operator tags:

* **point-wise** (``Tag.pointwise``: add, mul, pow, exp, where, abs, ...):
  one FLOP per output element, whatever the op (``addcmul`` is one, not two);
* **reductions** (``Tag.reduction``: sum, mean, amax, ...): one FLOP per input
  element; a p-norm (``linalg_vector_norm``, ``norm``) two, a multiply and an
  add, as the matmul formulas count a multiply and an add apart;
* **``_foreach_`` lists**: a point-wise family as its point-wise op over every
  tensor of the list, ``_foreach_norm`` as a norm of each;

and, like matrix products, wherever they run (:func:`transform_flops`):

* **FFTs** (``_fft_c2c``, ``_fft_r2c``, ``_fft_c2r``): 5 n log2 n per complex
  transform of n points, half that for a real one (the usual radix-2 count);
* **vector products** (``dot``, ``vdot``, ``mv``): multiply and add apart, as
  torch counts ``mm``.

Fused kernels (softmax, ``logsumexp``) cost the point-wise ops and reductions
they fuse (:data:`FUSED`). Copies (``clone``, ``copy_``,
``_to_copy``) and every other operation (views, ``cat``, indexing, ``fill_``,
``zeros``) move data: no rule prices them; :data:`DATA_MOVEMENT` lists the ones
mecsim's algorithms use, and a test checks no other op goes uncounted.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

_aten = torch.ops.aten

COPIES = frozenset({"clone", "copy_", "_to_copy", "lift_fresh_copy", "alias", "detach"})
"""Point-wise-tagged (or near) ops that only copy: no arithmetic."""

PER_ELEMENT = {"linalg_vector_norm": 2, "norm": 2, "_foreach_norm": 2}
"""Reductions that cost more than one FLOP per input element."""

FUSED = {
    "_softmax": 5,
    "_log_softmax": 5,
    "_softmax_backward_data": 4,
    "_log_softmax_backward_data": 4,
    "logsumexp": 4,
}
"""Fused kernels priced per element of their largest tensor as the point-wise ops and
reductions they fuse: (log-)softmax = max, subtract, exp, sum, divide (or log and
subtract); its backward = product, sum, subtract, product; logsumexp = max, subtract,
exp, sum."""

DATA_MOVEMENT = frozenset(
    {
        *COPIES,
        "view",
        "_unsafe_view",
        "reshape",
        "t",
        "transpose",
        "permute",
        "expand",
        "squeeze",
        "unsqueeze",
        "slice",
        "slice_backward",
        "select",
        "select_backward",
        "narrow",
        "split",
        "split_with_sizes",
        "unbind",
        "cat",
        "stack",
        "index",
        "index_select",
        "gather",
        "new_zeros",
        "new_empty",
        "new_empty_strided",
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "scalar_tensor",
        "fill_",
        "zero_",
        "view_as_real",
        "view_as_complex",
        "_reshape_alias",
        "_conj",
        "resolve_conj",
        "resolve_neg",
        "_foreach_copy_",
        "_foreach_zero_",
        "lift_fresh",
        "arange",
        "constant_pad_nd",
        "flip",
        "roll",
        "as_strided",
        "_local_scalar_dense",
        "item",
    }
)
"""Ops mecsim's algorithms run that only move, view or create data: no FLOPs."""


def op_name(func: Any) -> str:
    """The overload packet's name of a dispatched op (``aten.add.Tensor`` -> ``add``)."""
    return func._overloadpacket.__name__


def elementwise_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int | None:
    """FLOPs of one dispatched op under the rules of this module; None when no rule prices
    it (it moves, views or creates data)."""
    name = op_name(func)
    if name in COPIES:
        return None
    if name.startswith("_foreach_"):
        return _foreach_flops(name, args, out)
    if name in FUSED:
        return FUSED[name] * max(t.numel() for t in _tensors((args, kwargs, out)))
    tags = func.tags
    if torch.Tag.pointwise in tags:
        return max((t.numel() for t in _tensors(out)), default=0)
    if torch.Tag.reduction in tags:
        largest = max((t.numel() for t in _tensors((args, kwargs))), default=0)
        return PER_ELEMENT.get(name, 1) * largest
    return None


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


@functools.cache
def _foreach_is_pointwise(name: str) -> bool:
    """Whether a ``_foreach_`` op applies a point-wise op (``_foreach_mul_``: ``aten.mul``)."""
    base = getattr(_aten, name.removeprefix("_foreach_").removesuffix("_"), None)
    return base is not None and any(
        torch.Tag.pointwise in getattr(base, o).tags for o in base.overloads()
    )


def _foreach_flops(name: str, args: tuple, out: Any) -> int | None:
    inputs = args[0] if args and isinstance(args[0], (list, tuple)) else []
    if name in PER_ELEMENT:
        return PER_ELEMENT[name] * sum(t.numel() for t in inputs)
    if not _foreach_is_pointwise(name):
        return None
    results = _tensors(out) or _tensors(inputs)  # an in-place op returns nothing
    return sum(t.numel() for t in results)


def transform_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int | None:
    """FLOPs of an FFT or a matrix-vector product (counted wherever it runs, as torch's
    registry counts matrix products); None for any other op."""
    formula = TRANSFORMS.get(op_name(func))
    return None if formula is None else formula(args, kwargs, out)


def _fft(points_factor: float) -> Callable[[tuple, dict, Any], int]:
    """An FFT's price: ``points_factor`` n log2 n per transform of n points over ``dim``."""

    def flops(args: tuple, kwargs: dict, out: Any) -> int:
        source, result = args[0], _tensors(out)[0]
        dims = args[1] if len(args) > 1 else kwargs["dim"]
        larger = source if source.numel() >= result.numel() else result
        points = math.prod(larger.shape[d] for d in dims)
        if points <= 1:
            return 0
        transforms = larger.numel() // points
        return int(points_factor * points * math.log2(points)) * transforms

    return flops


def _multiply_add(args: tuple, kwargs: dict, out: Any) -> int:
    """A vector or matrix-vector product: a multiply and an add per element of its first
    operand (``dot``: 2 n; ``mv`` of an m x n matrix: 2 m n)."""
    return 2 * args[0].numel()


TRANSFORMS: dict[str, Callable[[tuple, dict, Any], int]] = {
    "_fft_c2c": _fft(5.0),
    "_fft_r2c": _fft(2.5),
    "_fft_c2r": _fft(2.5),
    "dot": _multiply_add,
    "vdot": _multiply_add,
    "mv": _multiply_add,
}
"""Ops priced by their own formula, counted wherever they run (see :func:`transform_flops`)."""
