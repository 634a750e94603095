"""Compute device profiles: effective FLOP/s and power draw.

The figures are *effective* training throughputs of small-batch PyTorch
workloads (well below datasheet peaks) and typical board power under load.
They are order-of-magnitude assumptions, stated here so a user can replace
them; define others in a scenario's ``[[devices]]`` tables, or register a
profile from Python (a plug-in). Receive
power is drawn while downloading; idle power while a client waits in a round
(for the server's next model, or for spectrum); both are typical radio and
SoC figures, not measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mecsim.common.registry import Registry

Number = float | np.ndarray


def compute_seconds(flops: Number, flops_per_s: Number) -> Number:
    """Seconds a device of ``flops_per_s`` takes for ``flops`` (floats, or arrays in bulk
    rounds: one formula for both paths)."""
    return flops / flops_per_s


def energy_j(power_w: Number, seconds: Number) -> Number:
    """Joules drawn at ``power_w`` for ``seconds`` (computing, sending or receiving)."""
    return power_w * seconds


@dataclass(frozen=True)
class DeviceProfile:
    """A compute device.

    Args:
        name: registry name.
        flops_per_s: effective training throughput in FLOP/s.
        power_w: power drawn while computing, in W.
        rx_power_w: power drawn while receiving (downloading), in W.
        idle_power_w: power drawn while waiting in a round, in W.
    """

    name: str
    flops_per_s: float
    power_w: float
    rx_power_w: float = 0.0
    idle_power_w: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.flops_per_s) and self.flops_per_s > 0):
            raise ValueError(
                f"device {self.name!r}: flops_per_s = {self.flops_per_s} must be a positive "
                "finite number of FLOP/s"
            )
        for key in ("power_w", "rx_power_w", "idle_power_w"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"device {self.name!r}: {key} = {value} must be a finite power >= 0 W"
                )

    def compute_time(self, flops: float) -> float:
        """Seconds to execute ``flops`` FLOPs."""
        return compute_seconds(flops, self.flops_per_s)

    def compute_energy(self, seconds: float) -> float:
        """Joules drawn while computing for ``seconds``."""
        return energy_j(self.power_w, seconds)


DEVICES: Registry[DeviceProfile] = Registry("device", "clients.device")

for _name, _flops, _power, _rx, _idle, _desc in [
    ("iot-low", 1e9, 1.5, 0.1, 0.05, "low-end IoT board (Cortex-A53 class): 1 GFLOP/s, 1.5 W"),
    ("phone-mid", 2e10, 3.0, 0.5, 0.2, "mid-range phone SoC: 20 GFLOP/s, 3 W"),
    ("phone-high", 1e11, 5.0, 0.7, 0.3, "high-end phone SoC with NPU/GPU: 100 GFLOP/s, 5 W"),
    ("jetson", 1e12, 15.0, 1.0, 2.0, "embedded edge GPU (Jetson class): 1 TFLOP/s, 15 W"),
    ("edge-server", 2e13, 300.0, 5.0, 50.0, "edge GPU server: 20 TFLOP/s, 300 W"),
]:
    DEVICES.add(
        _name,
        DeviceProfile(_name, _flops, _power, _rx, _idle),
        f"{_desc}; receive {_rx:g} W, idle {_idle:g} W",
    )


def device_catalog(extra: Sequence[DeviceProfile] = ()) -> Registry[DeviceProfile]:
    """The built-in and plug-in devices plus ``extra`` (a scenario's ``[[devices]]``), as
    a registry of their own: a scenario's devices never enter :data:`DEVICES`, so two
    scenarios in one process may each define theirs."""
    if not extra:
        return DEVICES
    catalog: Registry[DeviceProfile] = Registry("device", "clients.device")
    for name, description in DEVICES.describe().items():
        catalog.add(name, DEVICES.get(name), description)
    for device in extra:
        catalog.add(device.name, device, f"from the scenario: {device.flops_per_s:g} FLOP/s, "
                    f"{device.power_w:g} W")  # fmt: skip
    return catalog
