"""Hand-batched forward passes of many clients' models at once.

Under ``vmap`` every layer of a model runs through functorch's batching
rules: a convolution over stacked clients becomes a grouped convolution
whose bias is added apart, and the client dimension is moved by a copy
before each pooling. For plain stacks of common layers the same
computation can be written directly on the stacked (physical) tensors,
clients kept beside the channels as the groups of one grouped convolution
(layout ``[batch, clients * channels, H, W]``, channels-last in memory) and
beside the batch as one batched matmul for linear layers (layout
``[clients, batch, features]``): no copies between layers and the bias
fused into each convolution. Channels-last matters most: oneDNN runs
cnn-small's first grouped convolution (one input channel per client),
forward and backward, in 0.33 ms against 3.0 ms in NCHW for 50 clients.
On a CPU a batched SGD step of ``cnn-small`` over 50 clients takes
0.94-1.05x the time of one model on the same samples, against 1.6-1.7x
through vmap's rules (``benchmarks/bench_local_training.py``).

:func:`stacked_forward` plans such a forward pass for a model when every
module of it is supported, and :func:`call_stacked` runs it inside
``vmap``: it takes the physical tensors out of the current vmap level, runs
the plan, and hands the outputs back batched, so a loss written for one
client (and autograd through it) sees exactly what vmap would give it.
Anything else, a model with an unsupported module or tensors at another
functorch level, runs through ``vmap``'s rules as before.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from mecsim.learning.models.cnn import ConvNet
from mecsim.learning.models.layers import WEIGHTED
from mecsim.learning.models.stacked_conv import conv_clients, uses_formulations

try:  # private functorch API (what torch.func.vmap itself uses); absent -> vmap's rules
    from torch._C._functorch import (
        _add_batch_dim,
        _unwrap_batched,
        is_batchedtensor,
        maybe_current_level,
        maybe_get_level,
    )
except ImportError:  # pragma: no cover - depends on the torch build
    _add_batch_dim = None

TensorDict = dict[str, Tensor]
_SUPPORTED = (nn.Conv2d, nn.Linear, nn.BatchNorm2d, nn.MaxPool2d, nn.ReLU, nn.Flatten)


@dataclass(frozen=True)
class _Step:
    module: nn.Module
    prefix: str  # dotted name + "." of the module's tensors
    head: bool  # the last conv/linear: its input is the "features" output


def _modules(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The model's modules in call order, or None when the order is not known."""
    if type(model) is ConvNet:  # a subclass may override forward
        features = [(f"features.{n}", m) for n, m in model.features.named_children()]
        classifier = [(f"classifier.{n}", m) for n, m in model.classifier.named_children()]
        return [*features, ("", nn.Flatten()), *classifier]
    if type(model) is nn.Sequential:
        return list(model.named_children())
    return None


def _supported(module: nn.Module) -> bool:
    if not isinstance(module, _SUPPORTED):
        return False
    if isinstance(module, nn.Conv2d):
        return module.padding_mode == "zeros" and not isinstance(module.padding, str)
    if isinstance(module, nn.Flatten):
        return module.start_dim == 1 and module.end_dim == -1
    if isinstance(module, nn.MaxPool2d):
        return not module.return_indices
    if isinstance(module, nn.BatchNorm2d):
        # momentum None (a cumulative average) would need each client's own batch count
        return module.affine and module.track_running_stats and module.momentum is not None
    return True


@dataclass(frozen=True)
class StackedForward:
    """A hand-batched forward pass: ``forward(params, buffers, x, training)``.

    Every tensor has a leading client dimension; the outputs, ``logits`` and
    ``features`` (the head's input), too. ``params`` and ``buffers`` name the
    tensors it reads: a call that lacks one goes through vmap's rules instead
    (``functional_call`` would have taken it from the template).
    """

    steps: tuple[_Step, ...]
    params: frozenset[str]
    buffers: frozenset[str]

    def __call__(
        self,
        params: TensorDict,
        buffers: TensorDict,
        x: Tensor,
        training: bool,
        kernels: str = "auto",
    ) -> dict[str, Tensor]:
        clients = x.shape[0]
        h, grouped = x, False  # grouped: [batch, clients * C, H, W]; else [clients, batch, ...]
        features = x
        for step in self.steps:
            module = step.module
            if isinstance(module, (nn.Conv2d, nn.BatchNorm2d, nn.MaxPool2d)) and not grouped:
                h, grouped = _to_grouped(h), True
            elif isinstance(module, (nn.Linear, nn.Flatten)) and grouped:
                h, grouped = _to_clients(h, clients), False
            if step.head:
                features = _to_clients(h, clients) if grouped else h
            h = _apply(step, h, params, buffers, clients, training, kernels)
        return {"logits": _to_clients(h, clients) if grouped else h, "features": features}


def stacked_forward(model: nn.Module) -> StackedForward | None:
    """A hand-batched forward pass of ``model``, or None when it has an unsupported part.

    Supported: :class:`~mecsim.learning.models.cnn.ConvNet` and plain ``nn.Sequential``
    models made of ``Conv2d`` (zero padding), ``BatchNorm2d`` (affine, running
    statistics, a momentum), ``MaxPool2d``, ``ReLU``, ``Flatten`` and ``Linear``.
    """
    modules = _modules(model)
    if not modules or not all(_supported(m) for _, m in modules):
        return None
    weighted = [i for i, (_, m) in enumerate(modules) if isinstance(m, WEIGHTED)]
    if not weighted:
        return None
    steps = tuple(
        _Step(m, f"{name}." if name else "", i == weighted[-1])
        for i, (name, m) in enumerate(modules)
    )
    return StackedForward(
        steps,
        frozenset(f"{s.prefix}{n}" for s in steps for n, _ in s.module.named_parameters()),
        frozenset(f"{s.prefix}{n}" for s in steps for n, _ in s.module.named_buffers()),
    )


def _to_grouped(h: Tensor) -> Tensor:
    """``[clients, batch, C, H, W]`` -> ``[batch, clients * C, H, W]``."""
    if h.dim() != 5:
        raise ValueError(
            f"a hand-batched conv stage needs [clients, batch, C, H, W], got {h.shape}"
        )
    clients, batch, channels = h.shape[:3]
    grouped = h.transpose(0, 1).reshape(batch, clients * channels, *h.shape[3:])
    return grouped.contiguous(memory_format=torch.channels_last)


def _to_clients(h: Tensor, clients: int) -> Tensor:
    """``[batch, clients * C, H, W]`` -> ``[clients, batch, C, H, W]``."""
    batch, channels = h.shape[0], h.shape[1] // clients
    return h.reshape(batch, clients, channels, *h.shape[2:]).transpose(0, 1)


def _apply(
    step: _Step,
    h: Tensor,
    params: TensorDict,
    buffers: TensorDict,
    clients: int,
    training: bool,
    kernels: str,
) -> Tensor:
    module, p = step.module, step.prefix
    if isinstance(module, nn.ReLU):
        return F.relu(h)
    if isinstance(module, nn.MaxPool2d):
        return F.max_pool2d(
            h, module.kernel_size, module.stride, module.padding, module.dilation, module.ceil_mode
        )
    if isinstance(module, nn.Flatten):
        return h.reshape(clients, h.shape[1], -1)
    if isinstance(module, nn.Linear):
        weight = params[p + "weight"]
        bias = None if module.bias is None else params[p + "bias"]
        flat = h.reshape(clients, -1, h.shape[-1])
        out = (
            flat @ weight.transpose(1, 2)
            if bias is None
            else torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2))
        )
        return out.reshape(*h.shape[:-1], out.shape[-1])
    if isinstance(module, nn.Conv2d):
        bias = None if module.bias is None else params[p + "bias"]
        out = conv_clients(
            _to_clients(h, clients),
            params[p + "weight"],
            bias,
            module.stride,
            module.padding,
            module.dilation,
            module.groups,
            kernels,
        )
        return out.transpose(0, 1).reshape(out.shape[1], -1, *out.shape[3:])  # grouped, a view
    return _batch_norm(module, p, h, params, buffers, training)


def _batch_norm(
    module: nn.BatchNorm2d,
    p: str,
    h: Tensor,
    params: TensorDict,
    buffers: TensorDict,
    training: bool,
) -> Tensor:
    """``nn.BatchNorm2d.forward`` per client: channels of the grouped layout are
    (client, channel) pairs, so batch statistics and running ones stay per client."""
    mean, var = buffers[p + "running_mean"], buffers[p + "running_var"]
    if training:  # as nn.BatchNorm2d: count the batch
        buffers[p + "num_batches_tracked"].add_(1)
    return F.batch_norm(
        h,
        mean.view(-1),  # views: the running statistics update in place, as the module's do
        var.view(-1),
        params[p + "weight"].reshape(-1),
        params[p + "bias"].reshape(-1),
        training,
        module.momentum,
        module.eps,
    )


def call_stacked(
    forward: StackedForward,
    params: TensorDict,
    buffers: TensorDict,
    x: Tensor,
    training: bool,
    kernels: str = "auto",
) -> dict[str, Tensor] | None:
    """Run ``forward`` on the physical tensors of the current vmap level.

    Returns the outputs batched at that level, or None when ``x`` is not
    batched at the current level, a tensor the pass reads is missing, or
    another tensor is wrapped by a functorch transform other than this vmap
    (the caller then runs the model through vmap's rules).
    """
    if _add_batch_dim is None or not is_batchedtensor(x):
        return None
    if not (forward.params <= params.keys() and forward.buffers <= buffers.keys()):
        return None
    level = maybe_current_level()
    if level is None or maybe_get_level(x) != level:
        return None
    tensors = (*params.values(), *buffers.values())
    if any(maybe_get_level(t) not in (-1, level) for t in tensors):
        return None
    physical_x = _unbatch(x, level, 0)
    clients = physical_x.shape[0]

    out = forward(
        {k: _unbatch(v, level, clients) for k, v in params.items()},
        {k: _unbatch(v, level, clients, own=True) for k, v in buffers.items()},
        physical_x,
        training,
        kernels,
    )
    return {k: _add_batch_dim(v, 0, level) for k, v in out.items()}


def _unbatch(t: Tensor, level: int, clients: int, own: bool = False) -> Tensor:
    """``t``'s physical tensor with the client dimension first.

    A tensor not batched at ``level`` is shared by all clients: it is expanded,
    and copied when ``own`` (a buffer that BatchNorm updates in place).
    """
    if maybe_get_level(t) != level:
        shared = t.unsqueeze(0).expand(clients, *t.shape)
        return shared.clone() if own else shared
    physical, dim = _unwrap_batched(t, level)
    return physical.movedim(dim, 0)


_CONV2D = (F.conv2d, torch.conv2d)


class ClientConvolutions(TorchFunctionMode):
    """Inside a vmap over clients, ``conv2d`` runs as
    :func:`~mecsim.learning.models.stacked_conv.conv_clients` (the measured
    formulation) instead of vmap's own rule; other calls run as usual. For models
    the hand-batched pass does not support (ResNet's residual blocks)."""

    def __init__(self, kernels: str = "auto") -> None:
        super().__init__()
        self.kernels = kernels

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CONV2D:
            out = _client_conv(self.kernels, *args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


def client_convolutions(x: Tensor, kernels: str = "auto") -> AbstractContextManager:
    """:class:`ClientConvolutions` when ``x`` is batched by a vmap and the device uses
    the formulations, else a context that changes nothing."""
    if _add_batch_dim is None or not is_batchedtensor(x):
        return nullcontext()
    if not uses_formulations(x.device, kernels):
        return nullcontext()
    return ClientConvolutions(kernels)


def _pair(value: int | tuple[int, ...]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[-1])


def _client_conv(kernels, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """The batched ``conv2d`` on physical tensors, or None to leave it to vmap's rule."""
    if _add_batch_dim is None or isinstance(padding, str) or not is_batchedtensor(x):
        return None
    level = maybe_current_level()
    tensors = [t for t in (x, weight, bias) if t is not None]
    if level is None or maybe_get_level(x) != level or x.dim() != 4:
        return None
    if any(maybe_get_level(t) not in (-1, level) for t in tensors):
        return None
    physical = _unbatch(x, level, 0)
    clients = physical.shape[0]
    out = conv_clients(
        physical,
        _unbatch(weight, level, clients),
        None if bias is None else _unbatch(bias, level, clients),
        _pair(stride),
        _pair(padding),
        _pair(dilation),
        groups,
        kernels,
    )
    # contiguous: vmap's rules for the next layer (BatchNorm) query the physical layout;
    # the input's dtype, as vmap's own rule gives: under autocast the product runs in
    # bf16, and BatchNorm's rule under vmap takes no bf16 input with fp32 statistics
    return _add_batch_dim(out.to(physical.dtype).contiguous(), 0, level)
