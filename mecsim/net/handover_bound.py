"""The handover schedule's quiet-tick bound, compiled (numba; moving runs only).

:meth:`HandoverSchedule._quiet_ticks <mecsim.net.handover.HandoverSchedule._quiet_ticks>`
is a dozen numpy passes over a [client x cell] array each tick (~1,000 clients x 19
cells at 100,000 moving clients); here it is one loop, the same arithmetic in the same
order, so the schedule is the same to the bit (``tests/net/test_handover.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def quiet_ticks(
    squared: np.ndarray, serving: np.ndarray, ratio: np.ndarray, reach: float,
    watch: np.ndarray, most: int,
) -> np.ndarray:  # fmt: skip
    """Per client (a row of ``squared``, its squared distances to each base station, m^2):
    the ticks after this one at which no cell ``c`` can pass the margin over the serving
    one ``s``: ``floor(min_c room_c / reach)``, ``room_c = (rho d_c - d_s) / (1 + rho) -
    1e-9 (d_c + d_s)``, ``rho = ratio[s, c]``; NaN gives 0, clipped to ``[0, most]``; 0 for
    ``watch`` clients."""
    n, cells = squared.shape
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if watch[i]:
            continue
        s = serving[i]
        own = np.sqrt(squared[i, s])
        least = np.inf
        for c in range(cells):
            if c != s:
                d = np.sqrt(squared[i, c])
                rho = ratio[s, c]
                room = (rho * d - own) / (1.0 + rho) - 1e-9 * (d + own)
                if room < least or math.isnan(room):
                    least = room
        ticks = np.floor(least / reach)
        if math.isnan(ticks):
            ticks = 0.0
        out[i] = np.int64(min(max(ticks, 0.0), float(most)))
    return out
