"""Physical layer: path loss, fading, noise, SINR, rate and a shared transmitter's sharing.

Defaults follow KAPC Table 4 (-40 dB at 1 m, exponent 4, -174 dBm/Hz, fading
gain 1). Units are SI: W, Hz, m, s, bits. Interference is taken in watts and
defaults to none: Table 4's unitless "N(1,4)" / "N(1,9)" read as watts
drowns every signal, so the scenario layer sets it with an explicit unit.
"""

from mecsim.channels.fading import (
    FADING,
    Fading,
    LogNormalShadowing,
    NoFading,
    RayleighFading,
    RicianFading,
    make_fading,
)
from mecsim.channels.link import ChannelModel, LinkBudget
from mecsim.channels.pathloss import LogDistancePathLoss
from mecsim.channels.rate import noise_power_w, shannon_rate, snr
from mecsim.channels.units import db_to_linear, dbm_to_w, linear_to_db, mhz_to_hz, w_to_dbm

__all__ = [
    "FADING",
    "ChannelModel",
    "Fading",
    "LinkBudget",
    "LogDistancePathLoss",
    "LogNormalShadowing",
    "NoFading",
    "RayleighFading",
    "RicianFading",
    "db_to_linear",
    "dbm_to_w",
    "linear_to_db",
    "make_fading",
    "mhz_to_hz",
    "noise_power_w",
    "shannon_rate",
    "snr",
    "w_to_dbm",
]
