"""Unit conversions for the physical layer: dBm <-> W, dB <-> linear, MHz -> Hz.

Every function accepts a float or a numpy array and returns the same kind.
"""

from __future__ import annotations

import numpy as np

FloatOrArray = float | np.ndarray


def db_to_linear(db: FloatOrArray) -> FloatOrArray:
    """Power ratio in dB -> linear ratio (10 dB -> 10)."""
    return 10.0 ** (db / 10.0)


def linear_to_db(ratio: FloatOrArray) -> FloatOrArray:
    """Linear power ratio (> 0) -> dB; raises ValueError for ratio <= 0."""
    if np.any(np.asarray(ratio) <= 0):
        raise ValueError(f"ratio must be > 0 to convert to dB, got {ratio!r}")
    db = 10.0 * np.log10(ratio)
    return db if isinstance(ratio, np.ndarray) else float(db)


def dbm_to_w(dbm: FloatOrArray) -> FloatOrArray:
    """Power in dBm -> watts (30 dBm -> 1 W)."""
    return db_to_linear(dbm - 30.0)


def w_to_dbm(watts: FloatOrArray) -> FloatOrArray:
    """Power in watts (> 0) -> dBm (1 W -> 30 dBm)."""
    return linear_to_db(watts) + 30.0


def mhz_to_hz(mhz: FloatOrArray) -> FloatOrArray:
    """Frequency or bandwidth in MHz -> Hz."""
    return mhz * 1e6
