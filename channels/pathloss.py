"""Large-scale path loss.

KAPC Table 4 defaults: path loss constant -40 dB at reference distance 1 m,
path loss exponent 4, client distances U[100, 500] m.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mecsim.channels.units import FloatOrArray, db_to_linear, require


@dataclass(frozen=True)
class LogDistancePathLoss:
    """Log-distance path loss: gain = 10^(constant_db/10) * (d / d0)^-exponent.

    Args:
        constant_db: path loss constant h0 at the reference distance, dB.
        reference_m: reference distance d0, m (> 0).
        exponent: path loss exponent a (>= 0).
    """

    constant_db: float = -40.0
    reference_m: float = 1.0
    exponent: float = 4.0

    def __post_init__(self) -> None:
        if self.reference_m <= 0:
            raise ValueError(f"reference_m must be > 0, got {self.reference_m}")
        if self.exponent < 0:
            raise ValueError(f"exponent must be >= 0, got {self.exponent}")

    def gain(self, distance_m: FloatOrArray) -> FloatOrArray:
        """Linear large-scale power gain at ``distance_m`` metres (> 0)."""
        require("distance_m", distance_m, positive=True)
        return self.gain_unchecked(distance_m)

    def gain_unchecked(self, distance_m: FloatOrArray) -> FloatOrArray:
        """:meth:`gain` for distances known to be > 0 (the medium clamps them to 1e-9 m):
        the same arithmetic without the check, which costs more than a few gains."""
        return db_to_linear(self.constant_db) * (distance_m / self.reference_m) ** -self.exponent

    def squared_form(self) -> tuple[float, float, int] | None:
        """(scale, reference_m^2, exponent / 2) when the exponent is an even integer from 2
        to 8: :meth:`gain_of_squared` is then ``scale / ratio^half`` in products, which a
        compiled loop repeats to the bit (None otherwise: a power, which numpy's SIMD
        kernels and the C library round differently)."""
        half = 0.5 * self.exponent
        if half != int(half) or not 1 <= half <= 4:
            return None
        return db_to_linear(self.constant_db), self.reference_m**2, int(half)

    def gain_of_squared(self, squared_m2: np.ndarray) -> np.ndarray:
        """:meth:`gain` at distances given squared (m^2, > 0), unchecked: one power, no
        square root (the hot path of moving clients' geometry)."""
        form = self.squared_form()
        ratio = squared_m2 / self.reference_m**2
        if form is not None and np.ndim(ratio):  # products, not a power
            scale, _, half = form
            power = ratio * ratio if half > 1 else ratio.copy()
            for _ in range(half - 2):
                np.multiply(power, ratio, out=power)
            return np.divide(scale, power, out=power)
        return db_to_linear(self.constant_db) * ratio ** (-0.5 * self.exponent)
