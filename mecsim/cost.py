"""Cost model: metered FLOPs, compute time and energy, transmit time and energy.

FLOPs are metered, not declared. A training step's FLOPs are what PyTorch
dispatches for it: :class:`StepMeter` runs one step of the task's real loss
(forward of every model the loss calls, then ``autograd.grad`` with respect
to the trainable parameters) under :class:`~mecsim.models.flops.FlopCount` on a
zero batch of the step's shape, and caches the count per (architecture,
task, trainable set, batch sizes). So backward is charged only for what
autograd runs: weight gradients of trainable layers and input gradients
down to the lowest trainable layer; a head-only task costs forward + head
backward. The count depends only on shapes, so serial, batched and
cost-only runs (on the meta device) record the same FLOPs. Matrix products
and convolutions are counted; elementwise work a loss adds (a proximal
term, an FFT of the weights) is added by the algorithm's ``extra_flops``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import torch

from mecsim.devices import DeviceProfile
from mecsim.models.flops import FlopCount
from mecsim.state import ModelState, TensorDict, zeros_like
from mecsim.training import Loss, ModelFunction


class StepMeter:
    """FLOPs of one training step of a loss, counted once per shape and cached."""

    def __init__(self) -> None:
        self._cache: dict[Hashable, int] = {}

    def step_flops(
        self,
        key: Hashable,
        function: ModelFunction,
        loss: Loss,
        start: ModelState,
        consts: TensorDict,
        shapes: Mapping[str, tuple[int, ...]],
        trainable: frozenset[str] | None,
    ) -> int:
        """FLOPs of one step of ``loss`` on zero batches of ``shapes`` (split -> [b, ...]).

        ``key`` identifies everything the count depends on besides the shapes
        (architecture, task, trainable set). The names and shapes of ``consts``
        are part of the cache key too: a loss that runs one forward per
        constant model (FedDF's teachers) costs more when there are more.
        """
        signature = tuple(sorted((k, tuple(v.shape)) for k, v in consts.items()))
        full = (key, tuple(sorted(shapes.items())), trainable, signature)
        if full not in self._cache:
            self._cache[full] = _count_step(function, loss, start, consts, shapes, trainable)
        return self._cache[full]


def _count_step(
    function: ModelFunction,
    loss: Loss,
    start: ModelState,
    consts: TensorDict,
    shapes: Mapping[str, tuple[int, ...]],
    trainable: frozenset[str] | None,
) -> int:
    reference = next(iter(start.params.values()))
    device = reference.device
    if device.type == "meta" and _elements(start, consts, shapes) <= SMALL_STEP_ELEMENTS:
        device = torch.device("cpu")  # the same count, without importing Dynamo
        start = ModelState(zeros_like(start.params, device), zeros_like(start.buffers, device))
        consts = zeros_like(consts, device)
    batch = {
        name: {
            "x": torch.zeros(shape, device=device, dtype=reference.dtype),
            "y": torch.zeros(shape[0], dtype=torch.long, device=device),
            "i": torch.zeros(shape[0], dtype=torch.long, device=device),
        }
        for name, shape in shapes.items()
    }
    names = [k for k in start.params if trainable is None or k in trainable]
    leaves = {k: start.params[k].detach().requires_grad_(True) for k in names}
    params = {**{k: v.detach() for k, v in start.params.items()}, **leaves}
    buffers = {k: v.clone() for k, v in start.buffers.items()}
    function.model.train()
    with FlopCount() as counter:
        value = loss(function.bind(params, buffers), params, batch, consts)
        if names:
            torch.autograd.grad(value, [leaves[k] for k in names], allow_unused=True)
    return counter.total


SMALL_STEP_ELEMENTS = 4_000_000
"""A step on the meta device (cost-only runs) is counted on the CPU, on zeros, when its
weights, constants and batches hold at most this many elements (16 MB of float32, a few
milliseconds): the count depends only on shapes, and the meta kernels of common ops
(``addmm``, ``relu``) are Python references whose first call imports ``torch._dynamo``
(0.9 s)."""


def _elements(start: ModelState, consts: TensorDict, shapes: Mapping[str, tuple[int, ...]]) -> int:
    tensors = [*start.params.values(), *start.buffers.values(), *consts.values()]
    return sum(t.numel() for t in tensors) + sum(math.prod(s) for s in shapes.values())


def compute_cost(flops: float, device: DeviceProfile) -> tuple[float, float]:
    """(seconds, joules) to execute ``flops`` on ``device``."""
    seconds = device.compute_time(flops)
    return seconds, device.compute_energy(seconds)


def transmit_cost(nbytes: int, rate_bps: float, tx_power_w: float) -> tuple[float, float]:
    """(seconds, joules) to send ``nbytes`` at ``rate_bps`` with ``tx_power_w``."""
    if nbytes == 0:
        return 0.0, 0.0
    seconds = 8 * nbytes / rate_bps
    return seconds, tx_power_w * seconds
