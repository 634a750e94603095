"""Noise power, SINR and Shannon rate (W, Hz, bit/s).

Rate = B log2(1 + p |g|^2 h0 (d/d0)^-a / (I + N0 B)), as in KAPC Table 4's
model. Interference I arrives here in watts: Table 4's co-channel
interference "N(1,4)" / "N(1,9)" has no unit, and read as watts it drowns
every signal (SINR ~ 1e-12), so mecsim configures interference with an
explicit unit in the scenario layer and defaults to none.
"""

from __future__ import annotations

from mecsim.channels.units import FloatOrArray, dbm_to_w, log2, require


def noise_power_w(psd_dbm_hz: float, bandwidth_hz: FloatOrArray) -> FloatOrArray:
    """Thermal noise power N0 B in W, from a PSD in dBm/Hz and a bandwidth in Hz (> 0)."""
    require("bandwidth_hz", bandwidth_hz, positive=True)
    return dbm_to_w(psd_dbm_hz) * bandwidth_hz


def snr(
    received_w: FloatOrArray, interference_w: FloatOrArray, noise_w: FloatOrArray
) -> FloatOrArray:
    """Linear SINR = received / (interference + noise), all powers in W."""
    require("received_w", received_w, positive=False)
    require("interference_w", interference_w, positive=False)
    require("noise_w", noise_w, positive=True)
    return received_w / (interference_w + noise_w)


def shannon_rate(bandwidth_hz: FloatOrArray, snr_linear: FloatOrArray) -> FloatOrArray:
    """Shannon capacity B log2(1 + SINR) in bit/s, bandwidth in Hz, SINR linear (>= 0)."""
    require("bandwidth_hz", bandwidth_hz, positive=True)
    require("snr_linear", snr_linear, positive=False)
    return bandwidth_hz * log2(1.0 + snr_linear)
