"""A tick of moving clients on the event medium in two compiled calls (numba).

At a tick every open reception is brought up to date at the old positions, aimed
at the new ones and given the new tick's interference and rates
(:meth:`EventMedium._new_tick <mecsim.channels.event_medium.EventMedium._new_tick>`).
That is eight compiled loops with ~60 array calls of Python between them, ~0.3 ms
a tick at 2,000 receptions on the air (a 10,000-client round has ~2,000 ticks).
Where the path loss is products (an even path-loss exponent), the uplink rows run the
same loops from two calls, in the same order on the same arrays (the downlink rows,
a broadcast's, as the general path does them): :func:`bring_and_aim` (the pieces
since the anchors at the old gains, then each receiver and distance at the new
positions), the path gains of those distances in numpy (its power), and
:func:`heard_refreshed` (the station board at the new gains, each reception's
interference from it, its rates and keys). A tick done so is the general path's to
the bit (``tests/channels/test_tick_pass.py``). After the tick's handovers,
:func:`floored` re-keys the uplinks that could end before the next tick at the
interference they hear at least until then.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange

from mecsim.channels.kernels import (
    PARALLEL_ROWS,
    aim,
    aim_parallel,
    integrate,
    integrate_parallel,
    link_rate,
    refresh,
    refresh_parallel,
    station_heard,
    station_heard_parallel,
    station_tables,
)

# A function loaded from numba's cache that calls a parallel one does not launch numba's
# threads, as the parallel one's own dispatcher does on first use: called in a process
# where no parallel loop has run yet (a few clients on the air), it segfaulted. Launched
# here, before either can be called.
numba.get_num_threads()


@njit(cache=True)
def bring_and_aim(
    rows: np.ndarray, aimed: np.ndarray, n: int, t: float, stations: np.ndarray,
    table: np.ndarray, co: np.ndarray, width: np.ndarray, log_t: np.ndarray, log_tx: np.ndarray,
    log_sign: np.ndarray, log_cell: np.ndarray, at: np.ndarray, anchor: np.ndarray,
    heard: np.ndarray, rate: np.ndarray, sinr: np.ndarray, remaining: np.ndarray,
    sinr_time: np.ndarray, rx_cell: np.ndarray, share_b: np.ndarray, share_p: np.ndarray,
    noise_psd: np.ndarray, fade: np.ndarray, path_gain: np.ndarray,
    interference_w: np.ndarray, efficiency: np.ndarray, min_sinr: np.ndarray,
    up: np.ndarray, client: np.ndarray, tx: np.ndarray, serving: np.ndarray,
    station_xy: np.ndarray, radio_x: np.ndarray, radio_y: np.ndarray, cx: np.ndarray,
    cy: np.ndarray, rx: np.ndarray, ry: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Uplink ``rows`` up to ``t`` over the uplink log's events to ``n - 1`` at the
    stations' gains ``table`` (:func:`~mecsim.channels.kernels.integrate`), anchored at
    ``t`` with the log emptied (``at`` 0); then rows ``aimed`` (every open row) aimed
    from their clients' new positions (``cx``, ``cy``; :func:`~mecsim.channels.kernels.aim`):
    returns their distances."""
    gain_row = np.searchsorted(stations, rx_cell[rows])
    many = len(rows) >= PARALLEL_ROWS
    brought = (rows, gain_row, log_tx, table, co, width, log_t, log_tx, log_sign, log_cell, n,
               t, at, anchor, heard, rate, sinr, remaining, sinr_time, rx_cell, share_b,
               share_p, noise_psd, fade, path_gain, interference_w, efficiency,
               min_sinr)  # fmt: skip
    if many:
        integrate_parallel(*brought)
    else:
        integrate(*brought)
    for r in rows:
        anchor[r], at[r] = t, 0
    ends = (aimed, up, client, tx, serving, station_xy, radio_x, radio_y, cx, cy, rx, ry)
    return aim_parallel(*ends) if len(aimed) >= PARALLEL_ROWS else aim(*ends)


@njit(cache=True)
def heard_refreshed(
    rows: np.ndarray, t: float, rx_cell: np.ndarray, band: np.ndarray, senders: np.ndarray,
    stations: np.ndarray, width: np.ndarray, on_cell: np.ndarray, co: np.ndarray,
    gains: np.ndarray, log_tx: np.ndarray, log_sign: np.ndarray, log_cell: np.ndarray,
    remaining: np.ndarray, bits: np.ndarray, done: float, heard: np.ndarray,
    floor: np.ndarray, share_b: np.ndarray, share_p: np.ndarray, noise_psd: np.ndarray,
    fade: np.ndarray, path_gain: np.ndarray, interference_w: np.ndarray, efficiency: np.ndarray,
    min_sinr: np.ndarray, start: np.ndarray, block: np.ndarray, coherence: np.ndarray,
    deadline: np.ndarray, rate: np.ndarray, sinr: np.ndarray, done_at: np.ndarray,
    key: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The station board of uplinks ``senders`` (in band order) at ``gains``
    (:func:`~mecsim.channels.kernels.station_tables`, returned), the interference of
    uplink ``rows`` (decoded in cells ``rx_cell`` holding ``band``) from it with an empty
    log (:func:`~mecsim.channels.kernels.station_heard`), and their rates, next events
    and keys at ``t`` (:func:`~mecsim.channels.kernels.refresh`)."""
    full, scaled, bands, ends = station_tables(stations, senders, width, on_cell, co, gains)
    which = np.searchsorted(stations, rx_cell)
    many = len(rows) >= PARALLEL_ROWS
    looked_up = (which, rx_cell, band, bands, ends, full, scaled, gains, co, width, log_tx,
                 log_sign, log_cell, 0, 0)  # fmt: skip
    now = station_heard_parallel(*looked_up) if many else station_heard(*looked_up)
    for i in range(len(rows)):
        heard[rows[i]] = now[i]
    refreshed = (rows, t, remaining, bits, done, heard, floor, share_b, share_p, noise_psd, fade,
                 path_gain, interference_w, efficiency, min_sinr, start, block, coherence,
                 deadline, rate, sinr, done_at, key, np.zeros(0))  # fmt: skip
    if many:
        refresh_parallel(*refreshed)
    else:
        refresh(*refreshed)
    return full, scaled, bands, ends


FLOOR_MARGIN = 1e-6
"""A floor's part below the sum it bounds: the interference a row hears is summed in another
order (the board, then the events since), so a floor equal to it could pass it by a
rounding, and a key taken at it fall after the end it bounds."""


@njit(cache=True, parallel=True)
def floored(
    rows: np.ndarray, until: float, senders: np.ndarray, stations: np.ndarray,
    width: np.ndarray, on_cell: np.ndarray, co: np.ndarray, gains: np.ndarray, tx: np.ndarray,
    rx_cell: np.ndarray, anchor: np.ndarray, remaining: np.ndarray, bits: np.ndarray,
    done: float, floor: np.ndarray, share_b: np.ndarray, share_p: np.ndarray,
    noise_psd: np.ndarray, fade: np.ndarray, path_gain: np.ndarray,
    interference_w: np.ndarray, efficiency: np.ndarray, min_sinr: np.ndarray,
    start: np.ndarray, block: np.ndarray, coherence: np.ndarray, deadline: np.ndarray,
    key: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Uplink ``rows``' ``floor``, less than the interference they hear until ``until``:
    per station, the gains of the ``senders`` sure to stay on the air until then (those
    with a row whose key, taken with no floor, is not before it: none can end, fail or
    break sooner), each counted by ``b / B`` of the widest of their bands ``B`` (at most
    the ``min(1, b / B)`` it counts by), less :data:`FLOOR_MARGIN`; and each row's key
    again at its floor, as :func:`~mecsim.channels.kernels.refresh` takes it (a row
    already done keeps its own). Only rows whose key falls before ``until`` take one: the
    others cannot end before the next tick takes their keys again (their floor stays 0).
    Returns the rows that took one."""
    lasting = np.zeros(len(width), dtype=np.bool_)
    for r in rows:
        if key[r] >= until:
            lasting[tx[r]] = True
    summed, widest = np.zeros(len(stations)), 0.0
    for x in senders:
        if lasting[x]:
            widest = max(widest, width[x])
            for s in range(len(stations)):
                if co[stations[s], on_cell[x]]:
                    summed[s] += gains[x, s]
    soon = rows[key[rows] < until]  # the others cannot end before the next tick anyway
    which = np.searchsorted(stations, rx_cell[soon])
    for i in prange(len(soon)):
        r = soon[i]
        share = min(1.0, share_b[r] / widest) if widest > 0 else 0.0
        floor[r] = (1.0 - FLOOR_MARGIN) * summed[which[i]] * share
        if remaining[r] > done * bits[r]:
            best = link_rate(share_b[r], share_p[r], noise_psd[r], fade[r], path_gain[r],
                             interference_w[r], efficiency[r], min_sinr[r],
                             floor[r])[0]  # fmt: skip
            own = min(start[r] + (block[r] + 1) * coherence[r], deadline[r])
            key[r] = min(anchor[r] + remaining[r] / best if best > 0 else math.inf, own)
    return soon
