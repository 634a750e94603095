"""Truncated channel inversion: the power that brings the received SNR (without fading)
to ``network.uplink.target_snr_db``, capped at the client's maximum (Goldsmith,
*Wireless Communications*, 2005, Sec. 4.2.4: a near client sends less, a far one up to
its maximum, and one that cannot reach the target sends at its maximum)."""

from __future__ import annotations

from mecsim.policies.power import POWER_CONTROLS, PowerControl, Uplink


@POWER_CONTROLS.register(
    "channel_inversion", "the power for a target received SNR, capped at the maximum"
)
class ChannelInversion(PowerControl):
    def power_w(self, uplink: Uplink) -> float:
        target = 10 ** (self.settings.target_snr_db / 10)
        return min(uplink.max_power_w, uplink.power_for(target))
