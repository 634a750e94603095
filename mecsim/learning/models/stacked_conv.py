"""One convolution layer of many clients' models: formulations, and the measured choice.

A convolution over K stacked clients (input ``[K, B, Cin, H, W]``, weights
``[K, Cout, Cin/g, kh, kw]``) has more than one exact formulation, and which
is fastest depends on the device and the layer's shape:

* ``grouped_nhwc`` / ``grouped_nchw``: one grouped convolution with the
  clients beside the channels (``[B, K*Cin, H, W]``, K*g groups), in
  channels-last or plain layout. oneDNN runs it near the shared-weight bound
  on a CPU; cuDNN does so for wide images but runs some small layers one
  group at a time (a kernel per client, so a step's kernels grow with K).
* ``gemm``: the input unfolded once (im2col) and one batched matrix product
  per layer, ``[K, Cout, Cin*kh*kw] @ [K, Cin*kh*kw, B*Ho*Wo]``: a constant
  number of kernels whatever K, at the price of the unfolded copy.

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
        layout = torch.channels_last if channels_last else torch.contiguous_format
        out = F.conv2d(
            h.contiguous(memory_format=layout),
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
    clients, batch, channels, height, width = x.shape
    out_channels, kh, kw = weight.shape[1], weight.shape[3], weight.shape[4]
    rows = (height + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    cols_ = (width + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cols = F.unfold(
        x.reshape(clients * batch, channels, height, width), (kh, kw), dilation, padding, stride
    )
    # [K*B, Cin*kh*kw, L] -> [K*g, Cin/g*kh*kw, B*L]: one copy, whatever K
    cols = cols.view(clients, batch, groups, -1, rows * cols_).permute(0, 2, 3, 1, 4)
    cols = cols.reshape(clients * groups, -1, batch * rows * cols_)
    w = weight.reshape(clients * groups, out_channels // groups, -1)
    if bias is None:
        out = torch.bmm(w, cols)
    else:
        out = torch.baddbmm(bias.reshape(clients * groups, -1, 1), w, cols)
    return out.view(clients, out_channels, batch, rows, cols_).transpose(1, 2)


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
    key = (
        torch.cuda.get_device_name(x.device),
        tuple(x.shape),
        tuple(weight.shape),
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
    worker = threading.Thread(
        target=_time_all, args=(tensors, extra, (stride, padding, dilation, groups), repeat, times)
    )
    worker.start()
    worker.join()
    return min(times, key=times.get) if times else "grouped_nhwc"


def _time_all(tensors, bias, layer, repeat: int, times: dict[str, float]) -> None:
    """Best-of-``repeat`` seconds of each formulation's forward + backward into ``times``."""
    device = tensors[0].device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda _: None)
    inputs = [t.requires_grad_(True) for t in tensors]
    extra = None if bias is None else bias.requires_grad_(True)
    for name, conv in FORMULATIONS.items():
        elapsed = []
        try:
            for _ in range(repeat + 1):  # the first is a warm-up (cuDNN's search, caches)
                sync(device)
                start = time.perf_counter()
                conv(*inputs, extra, *layer).float().sum().backward()
                sync(device)
                elapsed.append(time.perf_counter() - start)
        except torch.OutOfMemoryError:
            continue
        times[name] = min(elapsed[1:])
