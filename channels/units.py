"""Unit conversions for the physical layer: dBm <-> W, dB <-> linear, MHz -> Hz.

Every function accepts a float or a numpy array and returns the same kind.
"""

from __future__ import annotations

import math

import numpy as np

FloatOrArray = float | np.ndarray


def require(name: str, value: FloatOrArray, *, positive: bool) -> None:
    """Raise ValueError unless ``value`` is > 0 (``positive``) or >= 0, elementwise.

    Plain floats take a fast path (no numpy call): the engine checks every
    transmission's values.
    """
    if isinstance(value, np.ndarray):
        bad = bool(np.any(value <= 0)) if positive else bool(np.any(value < 0))
    else:
        bad = value <= 0 if positive else value < 0
    if bad:
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")


def log2(x: FloatOrArray) -> FloatOrArray:
    """log2 of a float (math) or an array (numpy)."""
    return np.log2(x) if isinstance(x, np.ndarray) else math.log2(x)


def db_to_linear(db: FloatOrArray) -> FloatOrArray:
    """Power ratio in dB -> linear ratio (10 dB -> 10)."""
    return 10.0 ** (db / 10.0)


def linear_to_db(ratio: FloatOrArray) -> FloatOrArray:
    """Linear power ratio (> 0) -> dB; raises ValueError for ratio <= 0."""
    require("ratio (to convert to dB)", ratio, positive=True)
    return 10.0 * (np.log10(ratio) if isinstance(ratio, np.ndarray) else math.log10(ratio))


def dbm_to_w(dbm: FloatOrArray) -> FloatOrArray:
    """Power in dBm -> watts (30 dBm -> 1 W)."""
    return db_to_linear(dbm - 30.0)


def w_to_dbm(watts: FloatOrArray) -> FloatOrArray:
    """Power in watts (> 0) -> dBm (1 W -> 30 dBm)."""
    return linear_to_db(watts) + 30.0


def mhz_to_hz(mhz: FloatOrArray) -> FloatOrArray:
    """Frequency or bandwidth in MHz -> Hz."""
    return mhz * 1e6
