"""Cost model: metered FLOPs, compute time and energy, transmit time and energy.

FLOPs are metered, not declared. A model's forward FLOPs per sample are
counted once per architecture (``torch.utils.flop_counter``, see
:func:`mecsim.models.forward_flops_per_sample`); a forward hook then adds
``batch x FLOPs`` on every forward pass, times 3 when gradients are on
(forward + backward ~ 3x forward). Work a hook cannot see (a proximal term,
an FFT of the weights, k-means on the server) is added explicitly with
:meth:`FlopMeter.add`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from mecsim.devices import DeviceProfile
from mecsim.models import forward_flops_per_sample

BACKWARD_FACTOR = 3
"""FLOPs of a training step relative to a forward pass (forward + 2x backward)."""


def training_flops(samples: int, per_sample: int) -> int:
    """FLOPs of training on ``samples`` samples: forward + backward, what the hook meters."""
    return samples * per_sample * BACKWARD_FACTOR


class FlopMeter:
    """Counts FLOPs of every forward pass of ``model`` through a forward hook.

    Args:
        model: the architecture template the trainer calls (functional calls included).
        input_shape: one sample's shape, used to count per-sample forward FLOPs once.
    """

    def __init__(self, model: nn.Module, input_shape: tuple[int, ...]) -> None:
        self.per_sample = forward_flops_per_sample(model, input_shape)
        self.flops = 0
        self._active = False
        model.register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, args: tuple, output: object) -> None:
        if self._active:
            batch = args[0].shape[0]
            if torch.is_grad_enabled():
                self.flops += training_flops(batch, self.per_sample)
            else:
                self.flops += batch * self.per_sample

    def add(self, flops: int) -> None:
        """Add FLOPs a forward hook cannot see."""
        if self._active:
            self.flops += int(flops)

    @contextmanager
    def measure(self) -> Iterator[FlopMeter]:
        """Count the FLOPs of the enclosed work only (``self.flops`` restarts at 0)."""
        self.flops, self._active = 0, True
        try:
            yield self
        finally:
            self._active = False


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
