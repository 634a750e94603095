"""Random waypoint's position lookup for a few clients, compiled (numba; multi-cell runs).

The event medium asks where one or two clients are at each upload start and the
handover schedule ~1,000 a tick at 100,000 clients: as numpy passes over the
clients' legs (move on the cursor, then interpolate) a lookup cost ~40 us whatever
its size. Here it is one loop, the same arithmetic in the same order, so positions
are the same to the bit (``tests/net/test_mobility.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def positions_of(
    t: float, clients: np.ndarray, index: np.ndarray, legs: np.ndarray, stacked: np.ndarray,
    pause_s: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(x, y) of ``clients`` (distinct) at ``t``: each client's cursor entry (``index``
    into ``stacked`` [leg x 6 x client], ``legs`` [6 x client]: depart, arrive, from x, y,
    to x, y) moved on in place to the leg under way or paused after at ``t``, then the
    position along it (a fraction of the way, clipped to [0, 1]; 1 for a leg of no
    length)."""
    x, y = np.empty(len(clients)), np.empty(len(clients))
    for i in range(len(clients)):
        c = clients[i]
        while legs[1, c] + pause_s <= t:
            index[c] += 1
            for f in range(6):
                legs[f, c] = stacked[index[c], f, c]
        span = legs[1, c] - legs[0, c]
        done = (t - legs[0, c]) / span if span > 0 else 1.0
        done = min(max(done, 0.0), 1.0)
        x[i] = legs[2, c] + done * (legs[4, c] - legs[2, c])
        y[i] = legs[3, c] + done * (legs[5, c] - legs[3, c])
    return x, y
