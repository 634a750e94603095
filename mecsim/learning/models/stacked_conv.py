"""One convolution layer of many clients' models: formulations, and the measured choice.

A convolution over K stacked clients (input ``[K, B, Cin, H, W]``, weights
``[K, Cout, Cin/g, kh, kw]``) has more than one exact formulation, and which
is fastest depends on the device and the layer's shape:

* ``grouped_nhwc`` / ``grouped_nchw``: one grouped convolution with the
  clients beside the channels (``[B, K*Cin, H, W]``, K*g groups), in
  channels-last layout (a tensor already dense in the grouped layout, as the
  hand-batched pass keeps its stages, is left as it is) or plain layout. oneDNN runs it near the shared-weight bound
  on a CPU; cuDNN does so for wide images but runs some small layers one
  group at a time (a kernel per client, so a step's kernels grow with K).
* ``gemm``: the input's sliding windows copied once (im2col, from a view) and
  one batched matrix product per layer, ``[K, Cout, Cin*kh*kw] @
  [K, Cin*kh*kw, B*Ho*Wo]``: a constant number of kernels whatever K, at the
  price of the unfolded copy.

:func:`conv_clients` picks one per layer. ``kernels="auto"`` (the default,
``execution.kernels``) uses ``grouped_nhwc`` on a CPU (measured there: see
``benchmarks/bench_local_training.py``) and, on a GPU, times each
formulation's forward and backward once per (device, shapes, dtype) on the
layer's own tensors and caches the fastest for the process, as
``cudnn.benchmark`` does for cuDNN's algorithms (so the last bits of a GPU
run's weights may differ between processes; its events never do); a name pins
one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

Pair = tuple[int, int]
Formulation = Callable[[Tensor, Tensor, "Tensor | None", Pair, Pair, Pair, int], Tensor]

MODES = ("auto", "grouped_nhwc", "grouped_nchw", "gemm")
"""``execution.kernels``: measured per layer (auto) or one formulation everywhere."""

_choices: dict[tuple, str] = {}


def check_kernels(kernels: str) -> str:
    """``kernels`` if it is one of :data:`MODES`, else a ValueError naming them."""
    if kernels not in MODES:
        raise ValueError(f"kernels {kernels!r}: choose one of {', '.join(MODES)}")
    return kernels


def uses_formulations(device: torch.device, kernels: str) -> bool:
    """Whether convolutions under vmap's rules go through :func:`conv_clients` on
    ``device``: always on a GPU, on a CPU only when a formulation is pinned (vmap's
    own rule is as fast there)."""
    return device.type == "cuda" or kernels != "auto"


def choices() -> dict[tuple, str]:
    """The formulations chosen by measurement so far, by layer key (a copy)."""
    return dict(_choices)


def _grouped(channels_last: bool) -> Formulation:
    def conv(x, weight, bias, stride, padding, dilation, groups):
        clients, batch = x.shape[:2]
        h = x.transpose(0, 1).reshape(batch, -1, *x.shape[3:])  # a view in the grouped layout
        if not channels_last:
            h = h.contiguous()
        elif h.data_ptr() != x.data_ptr():  # not a grouped layout (vmap's): channels-last,
            height, width = x.shape[3:]  # in one copy
            h = x.permute(1, 3, 4, 0, 2).reshape(batch, height, width, -1).permute(0, 3, 1, 2)
        elif not h.is_contiguous():  # a grouped layout stays as the hand-batched pass has it
            h = h.contiguous(memory_format=torch.channels_last)
        out = F.conv2d(
            h,
            weight.reshape(-1, *weight.shape[2:]),
            None if bias is None else bias.reshape(-1),
            stride,
            padding,
            dilation,
            groups * clients,
        )
        return out.reshape(batch, clients, -1, *out.shape[2:]).transpose(0, 1)

    return conv


def _gemm(x, weight, bias, stride, padding, dilation, groups):
    clients, batch, channels = x.shape[:3]
    out_channels, kh, kw = weight.shape[1], weight.shape[3], weight.shape[4]
    padded = F.pad(x, (padding[1], padding[1], padding[0], padding[0])) if any(padding) else x
    # sliding windows as a view (Tensor.unfold, whose backward is one kernel; F.unfold
    # would launch one im2col kernel per sample): [K, B, Cin, Ho, Wo, kh, kw]
    windows = padded.unfold(3, dilation[0] * (kh - 1) + 1, stride[0])
    windows = windows.unfold(4, dilation[1] * (kw - 1) + 1, stride[1])
    windows = windows[..., :: dilation[0], :: dilation[1]]
    rows, columns = windows.shape[3], windows.shape[4]
    # -> [K*g, Cin/g*kh*kw, B*Ho*Wo]: one copy, whatever K
    cols = windows.permute(0, 2, 5, 6, 1, 3, 4).reshape(
        clients * groups, -1, batch * rows * columns
    )
    w = weight.reshape(clients * groups, out_channels // groups, -1)
    if bias is None:
        out = torch.bmm(w, cols)
    else:
        out = torch.baddbmm(bias.reshape(clients * groups, -1, 1), w, cols)
    return out.view(clients, out_channels, batch, rows, columns).transpose(1, 2)


FORMULATIONS: dict[str, Formulation] = {
    "grouped_nhwc": _grouped(channels_last=True),
    "grouped_nchw": _grouped(channels_last=False),
    "gemm": _gemm,
}


def conv_clients(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    groups: int = 1,
    kernels: str = "auto",
) -> Tensor:
    """``F.conv2d`` of every client on its own input, ``[K, B, Cout, Ho, Wo]`` (any strides);
    ``kernels``: one of :data:`MODES`."""
    name = kernels
    if kernels == "auto":
        name = _choose(x, weight, bias, stride, padding, dilation, groups)
    return FORMULATIONS[name](x, weight, bias, stride, padding, dilation, groups)


def _choose(x, weight, bias, stride, padding, dilation, groups) -> str:
    if x.device.type != "cuda":
        return "grouped_nhwc"
    key = (  # the client count to the next power of two: a run's groups shrink step by step
        torch.cuda.get_device_name(x.device),
        1 << (x.shape[0] - 1).bit_length(),
        tuple(x.shape[1:]),
        tuple(weight.shape[1:]),
        bias is not None,
        stride,
        padding,
        dilation,
        groups,
        x.dtype,
        torch.is_autocast_enabled(),
    )
    if key not in _choices:
        if torch.cuda.is_current_stream_capturing():
            return "grouped_nhwc"  # never time inside a graph capture (a step is warmed first)
        _choices[key] = _fastest(x, weight, bias, stride, padding, dilation, groups)
    return _choices[key]


def _fastest(x, weight, bias, stride, padding, dilation, groups, repeat: int = 3) -> str:
    """The formulation whose forward + backward on copies of these tensors is fastest.

    Timed on a thread of its own: the caller is inside a vmap, whose transform stack
    belongs to its thread, and the copies must be plain tensors with their own autograd.
    """
    tensors = [t.detach().clone() for t in (x, weight)]
    extra = None if bias is None else bias.detach().clone()
    times: dict[str, float] = {}
    device = x.device.type
    autocast = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
    layer = (stride, padding, dilation, groups)
    worker = threading.Thread(
        target=_time_all, args=(tensors, extra, layer, autocast, repeat, times)
    )
    worker.start()
    worker.join()
    return min(times, key=times.get) if times else "grouped_nhwc"


def _time_all(tensors, bias, layer, autocast, repeat: int, times: dict[str, float]) -> None:
    """Best-of-``repeat`` seconds of each formulation's forward + backward into ``times``,
    under the caller's autocast (thread-local state); a formulation that fails is left out."""
    device = tensors[0].device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda _: None)
    inputs = [t.requires_grad_(True) for t in tensors]
    extra = None if bias is None else bias.requires_grad_(True)
    enabled, dtype = autocast
    for name, conv in FORMULATIONS.items():
        elapsed = []
        try:
            for _ in range(repeat + 1):  # the first is a warm-up (cuDNN's search, caches)
                sync(device)
                start = time.perf_counter()
                with torch.autocast(device.type, dtype=dtype, enabled=enabled):
                    out = conv(*inputs, extra, *layer)
                out.float().sum().backward()
                sync(device)
                elapsed.append(time.perf_counter() - start)
        except RuntimeError:  # out of memory, say: not this one
            continue
        times[name] = min(elapsed[1:])
