"""Minimum energy under a deadline: the lowest power at which the upload's bits still
fit in ``network.uplink.power_deadline_s`` (without fading), capped at the maximum.

Sending ``b`` bits over ``B`` Hz in ``T`` s needs the rate ``b / T`` =
``B log2(1 + P g / (N0 B))``, so ``P = (2^(b / (B T)) - 1) N0 B / g``. The energy
``P T`` falls as ``T`` grows (Shannon: energy per bit is least at the lowest rate),
so within the deadline the slowest rate spends least: a client that would finish
early at full power stretches its upload to the deadline at a lower power. One that
cannot meet the deadline sends at its maximum and takes longer.
"""

from __future__ import annotations

from mecsim.policies.power import POWER_CONTROLS, PowerControl, Uplink


@POWER_CONTROLS.register("min_energy", "the lowest power that meets the upload deadline")
class MinimumEnergy(PowerControl):
    def power_w(self, uplink: Uplink) -> float:
        rate = uplink.bits / self.settings.power_deadline_s
        snr = 2 ** (rate / uplink.bandwidth_hz) - 1
        return min(uplink.max_power_w, uplink.power_for(snr))
