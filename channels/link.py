"""One wireless link (path loss + fading + noise -> rate) and downlink bandwidth sharing.

Uplink is FDMA: each client transmits on its own bandwidth, so one
``ChannelModel.sample`` per transmission gives its rate. Downlink is either a
broadcast of one payload (``broadcast_durations``) or unicast of per-client
payloads sharing the server bandwidth (``processor_sharing_durations``).
Interference is taken in watts; KAPC Table 4's unitless "N(1,4)" / "N(1,9)"
would drown every signal if read as watts, so the scenario layer converts an
explicitly-united setting (default none) and clips it at zero before it gets here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from mecsim.channels.fading import Fading
from mecsim.channels.pathloss import LogDistancePathLoss
from mecsim.channels.rate import noise_power_w, shannon_rate, snr
from mecsim.channels.units import linear_to_db


@dataclass(frozen=True)
class LinkSample:
    """The state of one transmission.

    Args:
        rate_bps: achieved rate, bit/s.
        snr_linear: SINR, linear.
        snr_db: SINR, dB (-inf when the SINR is 0).
        fading_gain: drawn small-scale power gain |g|^2, dimensionless.
    """

    rate_bps: float
    snr_linear: float
    snr_db: float
    fading_gain: float


@dataclass(frozen=True)
class ChannelModel:
    """Path loss, fading and thermal noise of a link; rate by Shannon or a fixed efficiency.

    Args:
        pathloss: large-scale path loss model.
        fading: small-scale fading model (``draw(rng) -> |g|^2``).
        noise_psd_dbm_hz: thermal noise power spectral density N0, dBm/Hz.
        spectral_efficiency: if set, rate = spectral_efficiency * B (bit/s/Hz)
            instead of Shannon; the SINR is still reported. This is the
            "table5" preset: KAPC Table 5's times (download 7.16 s, upload
            19.28 s for a 42.65 MiB ResNet-18) are reproduced only by
            time = bits / bandwidth, i.e. 1 bit/s/Hz.
    """

    pathloss: LogDistancePathLoss
    fading: Fading
    noise_psd_dbm_hz: float = -174.0
    spectral_efficiency: float | None = None

    def __post_init__(self) -> None:
        if self.spectral_efficiency is not None and self.spectral_efficiency <= 0:
            raise ValueError(f"spectral_efficiency must be > 0, got {self.spectral_efficiency}")

    def sample(
        self,
        *,
        tx_power_w: float,
        distance_m: float,
        bandwidth_hz: float,
        interference_w: float = 0.0,
        rng: np.random.Generator,
    ) -> LinkSample:
        """Draw one fading gain from ``rng`` and return the link's rate and SINR.

        The fading gain is drawn even when ``spectral_efficiency`` is set, so
        switching presets does not shift the random stream.

        Args:
            tx_power_w: transmit power p, W (>= 0).
            distance_m: transmitter-receiver distance d, m (> 0).
            bandwidth_hz: bandwidth B, Hz (> 0).
            interference_w: co-channel interference I, W (>= 0).
            rng: the fading stream.
        """
        gain = self.fading.draw(rng)
        return self.rate_at(
            tx_power_w=tx_power_w,
            distance_m=distance_m,
            bandwidth_hz=bandwidth_hz,
            interference_w=interference_w,
            fading_gain=gain,
        )

    def rate_at(
        self,
        *,
        tx_power_w: float,
        distance_m: float,
        bandwidth_hz: float,
        fading_gain: float = 1.0,
        interference_w: float = 0.0,
    ) -> LinkSample:
        """Rate and SINR for a given fading gain |g|^2 (no random draw); units as ``sample``."""
        if bandwidth_hz <= 0:
            raise ValueError(f"bandwidth_hz must be > 0, got {bandwidth_hz}")
        if tx_power_w < 0:
            raise ValueError(f"tx_power_w must be >= 0, got {tx_power_w}")
        if interference_w < 0:
            raise ValueError(f"interference_w must be >= 0, got {interference_w}")
        if fading_gain < 0:
            raise ValueError(f"fading_gain must be >= 0, got {fading_gain}")
        received = tx_power_w * fading_gain * self.pathloss.gain(distance_m)
        sinr = float(
            snr(received, interference_w, noise_power_w(self.noise_psd_dbm_hz, bandwidth_hz))
        )
        if self.spectral_efficiency is not None:
            rate = self.spectral_efficiency * bandwidth_hz
        else:
            rate = shannon_rate(bandwidth_hz, sinr)
        sinr_db = linear_to_db(sinr) if sinr > 0 else -math.inf
        return LinkSample(float(rate), sinr, sinr_db, float(fading_gain))


@dataclass(frozen=True)
class LinkBudget:
    """One link's rate as a function of the bandwidth and power it holds and its fading gain.

    ``sinr = p |g|^2 h / (N0 B + I_psd B + I_w)``: thermal noise and interference
    given as a power spectral density scale with the bandwidth held, a fixed
    interference power does not. At constant transmit PSD (power split in
    proportion to bandwidth) the SINR is then independent of the share held.

    Args:
        path_gain: large-scale power gain h (path loss), linear.
        noise_psd_w_hz: thermal noise N0, W/Hz.
        interference_psd_w_hz: interference PSD, W/Hz.
        interference_w: fixed interference power, W.
        spectral_efficiency: if set, rate = spectral_efficiency * B (the SINR is still reported).
    """

    path_gain: float
    noise_psd_w_hz: float
    interference_psd_w_hz: float = 0.0
    interference_w: float = 0.0
    spectral_efficiency: float | None = None

    def __call__(self, bandwidth_hz: float, power_w: float, gain: float) -> tuple[float, float]:
        """(rate bit/s, linear SINR) holding ``bandwidth_hz`` at ``power_w`` with fading ``gain``."""
        noise = (self.noise_psd_w_hz + self.interference_psd_w_hz) * bandwidth_hz
        sinr = power_w * gain * self.path_gain / (noise + self.interference_w)
        if self.spectral_efficiency is not None:
            return self.spectral_efficiency * bandwidth_hz, sinr
        return bandwidth_hz * math.log2(1.0 + sinr), sinr


def broadcast_durations(bits: float, rates: Sequence[float]) -> np.ndarray:
    """Receive time, s, of one ``bits`` payload broadcast to receivers at ``rates`` bit/s (> 0)."""
    rates_arr = np.asarray(rates, dtype=float)
    if bits < 0:
        raise ValueError(f"bits must be >= 0, got {bits}")
    if np.any(rates_arr <= 0):
        raise ValueError(f"rates must be > 0, got {rates_arr}")
    return bits / rates_arr


def processor_sharing_durations(
    bits: Sequence[float],
    rate_for: Callable[[int, float], float],
    total_bandwidth_hz: float,
) -> np.ndarray:
    """Finish times, s, of unicast payloads sharing the server bandwidth equally.

    All payloads start at t = 0; the receivers still receiving split
    ``total_bandwidth_hz`` equally, and when one finishes the rest get a larger
    share (progressive filling). Zero-bit payloads finish at 0.

    Args:
        bits: payload size per receiver, bits (>= 0).
        rate_for: ``rate_for(i, bandwidth_hz)`` is receiver i's rate, bit/s (> 0),
            when it holds ``bandwidth_hz`` Hz.
        total_bandwidth_hz: server bandwidth, Hz (> 0).
    """
    remaining = np.asarray(bits, dtype=float).copy()
    if np.any(remaining < 0):
        raise ValueError(f"bits must be >= 0, got {remaining}")
    if total_bandwidth_hz <= 0:
        raise ValueError(f"total_bandwidth_hz must be > 0, got {total_bandwidth_hz}")
    finish = np.zeros(len(remaining))
    active = np.flatnonzero(remaining > 0)
    now = 0.0
    while active.size:
        share = total_bandwidth_hz / active.size
        rates = np.array([rate_for(int(i), share) for i in active], dtype=float)
        if np.any(rates <= 0):
            raise ValueError(f"rate_for must return rates > 0, got {rates}")
        left = remaining[active] / rates
        step = float(left.min())
        now += step
        done = left <= step * (1.0 + 1e-12)
        finish[active[done]] = now
        remaining[active] -= rates * step
        active = active[~done]
    return finish
