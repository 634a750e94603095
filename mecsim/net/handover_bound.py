"""The handover schedule's compiled loops (numba; moving runs in several cells only).

:meth:`HandoverSchedule._evaluate <mecsim.net.handover.HandoverSchedule._evaluate>`
measures ~1,000 clients x 19 cells a tick at 100,000 moving clients; as numpy passes
over [client x cell] arrays (the A3 test, then the quiet-tick bound) it cost ~0.8 ms a
tick. Here each is one loop, the same arithmetic in the same order, so the schedule is
the same to the bit (``tests/net/test_handover_bound.py``).
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


@njit(cache=True)
def measure(
    k: int, t: float, clients: np.ndarray, power: np.ndarray, serving: np.ndarray,
    candidate: np.ndarray, since: np.ndarray, busy_until: np.ndarray, margin: float,
    trigger_ticks: int, interruption_s: float, watch: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Tick ``k`` (at ``t``) of the A3 event for ``clients`` (``power``: [client x cell]
    received power): a client not in a break whose strongest cell (the first of equals)
    is another than its serving one by more than ``margin`` is a candidate since the
    tick it became so for that cell; one that has been for ``trigger_ticks`` hands over
    to it. Updates the per-client ``serving``, ``candidate``, ``since`` and
    ``busy_until`` in place, sets ``watch`` (candidates and clients in a break: measured
    again at the next tick), and returns (the clients' indices in ``clients`` that hand
    over, their source cells, their targets), in order."""
    n, cells = power.shape
    moved = np.empty(n, dtype=np.int64)
    source, target = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        c, s = clients[i], serving[clients[i]]
        best = 0
        for j in range(1, cells):
            if power[i, j] > power[i, best]:
                best = j
        stronger = best != s and power[i, best] > margin * power[i, s] and busy_until[c] <= t
        if stronger and candidate[c] != best:
            since[c] = k
        candidate[c] = best if stronger else -1
        if stronger and k - since[c] >= trigger_ticks:
            moved[m], source[m], target[m] = i, s, best
            m += 1
            serving[c] = best
            busy_until[c] = t + interruption_s
            candidate[c] = -1
        watch[i] = stronger or busy_until[c] > t
    return moved[:m], source[:m], target[:m]


@njit(cache=True)
def due(checks: np.ndarray, k: int) -> np.ndarray:
    """The places (in order) of the ``checks`` (next checks) at or before tick ``k``."""
    out = np.empty(len(checks), dtype=np.int64)
    m = 0
    for i in range(len(checks)):
        if checks[i] <= k:
            out[m] = i
            m += 1
    return out[:m]
