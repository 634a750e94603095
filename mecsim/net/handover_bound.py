"""The handover schedule's compiled loops (numba; moving runs in several cells only).

:meth:`HandoverSchedule._evaluate <mecsim.net.handover.HandoverSchedule._evaluate>`
measures ~1,000 clients x 19 cells a tick at 100,000 moving clients; as numpy passes
over [client x cell] arrays (the A3 test, then the quiet-tick bound) it cost ~0.8 ms a
tick. Here each is one loop, the same arithmetic in the same order, so the schedule is
the same to the bit (``tests/net/test_handover_bound.py``). Where the path loss is
products (``LogDistancePathLoss.squared_form``) a tick is one pass over its due clients
(:func:`evaluate`: distances, received powers, the A3 test, the bound and the next
check of each in turn), with no [client x cell] arrays between them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from mecsim.channels.kernels import gain_of_squared


@njit(cache=True, error_model="numpy")
def _quiet(squared: np.ndarray, s: int, ratio: np.ndarray, reach: float, most: int) -> int:
    """One client's quiet ticks (:func:`quiet_ticks`), ``squared`` its row."""
    own = np.sqrt(squared[s])
    least = np.inf
    for c in range(len(squared)):
        if c != s:
            d = np.sqrt(squared[c])
            rho = ratio[s, c]
            room = (rho * d - own) / (1.0 + rho) - 1e-9 * (d + own)
            if room < least or math.isnan(room):
                least = room
    ticks = np.floor(least / reach)
    if math.isnan(ticks):
        ticks = 0.0
    return np.int64(min(max(ticks, 0.0), float(most)))


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
    out = np.zeros(len(serving), dtype=np.int64)
    for i in range(len(serving)):
        if not watch[i]:
            out[i] = _quiet(squared[i], serving[i], ratio, reach, most)
    return out


@njit(cache=True)
def _a3(
    k: int, t: float, c: int, power: np.ndarray, serving: np.ndarray, candidate: np.ndarray,
    since: np.ndarray, busy_until: np.ndarray, margin: float, trigger_ticks: int,
    interruption_s: float,
) -> tuple[int, bool]:  # fmt: skip
    """One client ``c``'s tick of :func:`measure` (``power`` its row): the cell it hands
    over to (-1: none), and whether it is watched."""
    s = serving[c]
    best = 0
    for j in range(1, len(power)):
        if power[j] > power[best]:
            best = j
    stronger = best != s and power[best] > margin * power[s] and busy_until[c] <= t
    if stronger and candidate[c] != best:
        since[c] = k
    candidate[c] = best if stronger else -1
    to = -1
    if stronger and k - since[c] >= trigger_ticks:
        to = best
        serving[c] = best
        busy_until[c] = t + interruption_s
        candidate[c] = -1
    return to, stronger or busy_until[c] > t


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
    n = len(clients)
    moved = np.empty(n, dtype=np.int64)
    source, target = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        s = serving[clients[i]]
        to, watch[i] = _a3(k, t, clients[i], power[i], serving, candidate, since, busy_until,
                           margin, trigger_ticks, interruption_s)  # fmt: skip
        if to >= 0:
            moved[m], source[m], target[m] = i, s, to
            m += 1
    return moved[:m], source[:m], target[:m]


@njit(cache=True)
def first_tick_from(time: float, tick_s: float) -> int:
    """The first tick ``k`` with ``k * tick_s >= time`` (``HandoverSchedule._first_ticks_from``
    on a scalar: the quotient's rounding corrected either way)."""
    k = np.int64(np.ceil(time / tick_s))
    if (k - 1) * tick_s >= time:
        k -= 1
    if k * tick_s < time:
        k += 1
    return k


@njit(cache=True, error_model="numpy")
def evaluate(
    k: int, t: float, clients: np.ndarray, places: np.ndarray, x: np.ndarray, y: np.ndarray,
    stations: np.ndarray, power: np.ndarray, form: tuple[float, float, int],
    serving: np.ndarray, candidate: np.ndarray, since: np.ndarray, busy_until: np.ndarray,
    margin: float, trigger_ticks: int, interruption_s: float, ratio: np.ndarray,
    reach: float, most: int, tick_s: float, next_check: np.ndarray, near_checks: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Tick ``k`` (at ``t``) for the due ``clients`` at (``x``, ``y``), one client at a
    time: its squared distances to the ``stations`` and received powers (``power`` times
    the path gain of ``form``, ``squared_form``'s products), :func:`measure`'s A3 test,
    then its next check, ``k + 1`` plus :func:`quiet_ticks`' bound (none with ``reach``
    < 0, no speed bound, or if watched), at least the first tick after a break, written to
    ``next_check`` and to ``near_checks`` at its ``places``. Returns :func:`measure`'s."""
    n, cells = len(clients), len(stations)
    squared, received = np.empty(cells), np.empty(cells)
    moved = np.empty(n, dtype=np.int64)
    source, target = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        c = clients[i]
        for s in range(cells):
            dx, dy = x[i] - stations[s, 0], y[i] - stations[s, 1]
            squared[s] = max(dx * dx + dy * dy, 1e-18)
            received[s] = gain_of_squared(squared[s], form[0], form[1], form[2]) * power[s]
        was = serving[c]
        to, watch = _a3(k, t, c, received, serving, candidate, since, busy_until, margin,
                        trigger_ticks, interruption_s)  # fmt: skip
        if to >= 0:
            moved[m], source[m], target[m] = i, was, to
            m += 1
        check = k + 1
        if reach >= 0.0 and not watch:  # < 0: no speed bound
            check += _quiet(squared, was, ratio, reach, most)
        if busy_until[c] > t:  # in a break: measures nothing, so changes nothing, until it ends
            check = max(check, first_tick_from(busy_until[c], tick_s))
        next_check[c] = check
        near_checks[places[i]] = check
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
