"""One wireless link: path loss, fading and noise give a rate for the band and power held.

:class:`ChannelModel` holds the physical parameters; its :meth:`~ChannelModel.budget`
is one link's :class:`LinkBudget`, ``rate(bandwidth, power, fading gain)``, which
the shared-transmitter engine (:mod:`mecsim.channels.sharing`) evaluates block by
block. Interference is taken in watts or W/Hz; KAPC Table 4's unitless
"N(1,4)" / "N(1,9)" would drown every signal if read as watts, so the scenario
layer converts an explicitly-united setting (default none) and clips it at zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mecsim.channels.fading import Fading
from mecsim.channels.pathloss import LogDistancePathLoss
from mecsim.channels.units import FloatOrArray, dbm_to_w


def link_rate(
    bandwidth_hz: FloatOrArray,
    power_w: FloatOrArray,
    gain: FloatOrArray,
    path_gain: FloatOrArray,
    noise_psd_w_hz: float,
    interference_psd_w_hz: float = 0.0,
    interference_w: FloatOrArray = 0.0,
    spectral_efficiency: float | None = None,
) -> tuple[FloatOrArray, FloatOrArray]:
    """(rate bit/s, linear SINR) of links holding ``bandwidth_hz`` at ``power_w`` with fading
    ``gain``: ``sinr = p |g|^2 h / ((N0 + I_psd) B + I_w)``, rate ``B log2(1 + sinr)`` (or
    ``spectral_efficiency * B``). Floats or numpy arrays: the event engine calls it per
    link and fading block, bulk rounds once for every client; an array's log2 is
    ``math.log2`` of each entry, so both agree bit for bit."""
    noise = (noise_psd_w_hz + interference_psd_w_hz) * bandwidth_hz
    sinr = power_w * gain * path_gain / (noise + interference_w)
    if spectral_efficiency is not None:
        rate = spectral_efficiency * bandwidth_hz
        return (np.broadcast_to(rate, np.shape(sinr)) if np.ndim(sinr) else rate), sinr
    if isinstance(sinr, np.ndarray):
        logs = np.fromiter(map(math.log2, (1.0 + sinr).ravel().tolist()), float, sinr.size)
        return bandwidth_hz * logs.reshape(sinr.shape), sinr
    return bandwidth_hz * math.log2(1.0 + sinr), sinr


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
        """(rate bit/s, linear SINR) holding ``bandwidth_hz`` at ``power_w`` with fading
        ``gain``."""
        if bandwidth_hz <= 0 or power_w < 0 or gain < 0:
            raise ValueError(
                "need bandwidth_hz > 0, power_w >= 0, gain >= 0; "
                f"got {bandwidth_hz}, {power_w}, {gain}"
            )
        return link_rate(  # type: ignore[return-value]
            bandwidth_hz,
            power_w,
            gain,
            self.path_gain,
            self.noise_psd_w_hz,
            self.interference_psd_w_hz,
            self.interference_w,
            self.spectral_efficiency,
        )


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

    def budget(
        self,
        distance_m: float,
        *,
        interference_w: float = 0.0,
        interference_psd_w_hz: float = 0.0,
    ) -> LinkBudget:
        """The :class:`LinkBudget` of a link of length ``distance_m`` (m, > 0).

        Args:
            distance_m: transmitter-receiver distance d, m.
            interference_w: co-channel interference power I, W (>= 0).
            interference_psd_w_hz: interference PSD, W/Hz (>= 0).
        """
        if interference_w < 0:
            raise ValueError(f"interference_w must be >= 0, got {interference_w}")
        if interference_psd_w_hz < 0:
            raise ValueError(f"interference_psd_w_hz must be >= 0, got {interference_psd_w_hz}")
        return LinkBudget(
            path_gain=float(self.pathloss.gain(distance_m)),
            noise_psd_w_hz=float(dbm_to_w(self.noise_psd_dbm_hz)),
            interference_psd_w_hz=interference_psd_w_hz,
            interference_w=interference_w,
            spectral_efficiency=self.spectral_efficiency,
        )
