"""Fixed: every upload at its client's maximum power (mecsim's default)."""

from __future__ import annotations

from mecsim.policies.power import POWER_CONTROLS, PowerControl, Uplink


@POWER_CONTROLS.register("fixed", "every upload at its client's maximum power (default)")
class Fixed(PowerControl):
    def power_w(self, uplink: Uplink) -> float:
        return uplink.max_power_w
