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
    into ``stacked`` [leg x client x 6], ``legs`` [client x 6]: depart, arrive, from x, y,
    to x, y) moved on in place to the leg under way or paused after at ``t``, then the
    position along it (a fraction of the way, clipped to [0, 1]; 1 for a leg of no
    length)."""
    x, y = np.empty(len(clients)), np.empty(len(clients))
    for i in range(len(clients)):
        c = clients[i]
        while legs[c, 1] + pause_s <= t:
            index[c] += 1
            for f in range(6):
                legs[c, f] = stacked[index[c], c, f]
        span = legs[c, 1] - legs[c, 0]
        done = (t - legs[c, 0]) / span if span > 0 else 1.0
        done = min(max(done, 0.0), 1.0)
        x[i] = legs[c, 2] + done * (legs[c, 4] - legs[c, 2])
        y[i] = legs[c, 3] + done * (legs[c, 5] - legs[c, 3])
    return x, y
