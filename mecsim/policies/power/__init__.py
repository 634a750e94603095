"""Uplink power control: the power each upload goes out at, within its client's maximum.

A policy is a class registered in :data:`POWER_CONTROLS` under
``network.uplink.power``; :meth:`PowerControl.power_w` gets the :class:`Uplink` as its
client knows it when it starts sending (its maximum power, its band, the large-scale
gain it measures on the downlink, the noise and the bits to send) and answers a
power in watts. The run's ``decisions`` table records each choice.

One module per policy: ``fixed``, ``channel_inversion``, ``min_energy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mecsim.common.registry import Registry


@dataclass(frozen=True)
class Uplink:
    """One upload as its client knows it before sending (SI units)."""

    max_power_w: float
    bandwidth_hz: float
    path_gain: float
    """Large-scale power gain to its base station (linear; no fading)."""
    noise_psd_w_hz: float
    bits: float

    def snr(self, power_w: float) -> float:
        """The SNR at the base station of ``power_w`` without fading (linear)."""
        return power_w * self.path_gain / (self.noise_psd_w_hz * self.bandwidth_hz)

    def power_for(self, snr: float) -> float:
        """The power that gives SNR ``snr`` (linear) without fading."""
        return snr * self.noise_psd_w_hz * self.bandwidth_hz / self.path_gain


class PowerControl:
    """Chooses an upload's power; subclasses implement :meth:`power_w`."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        """The ``[network.uplink]`` table (its ``target_snr_db``, ``power_deadline_s``)."""

    def power_w(self, uplink: Uplink) -> float:
        raise NotImplementedError


POWER_CONTROLS: Registry[type[PowerControl]] = Registry(
    "power control", "network.uplink.power", package="mecsim.policies.power"
)
