"""The event medium's search for its next change point, compiled with the uplink
receptions it brings up to date (numba; media of several cells only).

:meth:`EventMedium._next_event <mecsim.channels.event_medium.EventMedium._next_event>`
walks the open receptions in key order (:func:`~mecsim.channels.key_queue.candidates`)
and brings the stale ones whose key falls before the best end found up to date
(integrate, refresh, push), then walks again. Done from Python that is three compiled
calls and ~30 us of array bookkeeping per round of the walk, at ~30,000 change points a
round of 10,000 clients. :func:`search` runs those rounds in one call for uplink
receptions, whose pieces read the per-tick [transmitter x station] gain table, with the
same compiled loops in the same order; it hands back to Python the rows it cannot do
(a downlink, a sender whose gains this tick has not computed, a full heap), so the
result is the Python loop's to the bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mecsim.channels.kernels import NO_CAP, integrate, refresh, stamped
from mecsim.channels.key_queue import candidates, push_rows


@njit(cache=True)
def _here(found: np.ndarray, up: np.ndarray, at: np.ndarray, log_tx: np.ndarray, n: int,
          table_stamp: np.ndarray, tick: int, size: int, room: int) -> bool:  # fmt: skip
    """Whether :func:`search` can bring rows ``found`` up to date itself: all uplinks, the
    gains of every sender in the log since their anchors computed this tick, and room in
    the heap for their new entries."""
    if size + len(found) > room:
        return False
    for r in found:
        if not up[r]:
            return False
    return stamped(found, at, log_tx, n, table_stamp, tick)


@njit(cache=True)
def search(
    hk: np.ndarray, hr: np.ndarray, hs: np.ndarray, size: np.ndarray, stamp: np.ndarray,
    alive: np.ndarray, up: np.ndarray, at: np.ndarray, logged_down: int, done_at: np.ndarray,
    key: np.ndarray, limit: float, most: int, stations: np.ndarray, table: np.ndarray,
    table_stamp: np.ndarray, tick: int, co: np.ndarray, width: np.ndarray, log_t: np.ndarray,
    log_tx: np.ndarray, log_sign: np.ndarray, log_cell: np.ndarray, n: int, t: float,
    anchor: np.ndarray, heard: np.ndarray, floor: np.ndarray, rate: np.ndarray,
    sinr: np.ndarray,
    remaining: np.ndarray, sinr_time: np.ndarray, rx_cell: np.ndarray, share_b: np.ndarray,
    share_p: np.ndarray, noise_psd: np.ndarray, fade: np.ndarray, path_gain: np.ndarray,
    interference_w: np.ndarray, efficiency: np.ndarray, min_sinr: np.ndarray,
    bits: np.ndarray, done: float, start: np.ndarray, block: np.ndarray,
    coherence: np.ndarray, deadline: np.ndarray,
) -> tuple[float, np.ndarray]:  # fmt: skip
    """(the best end so far, the rows left for the caller to bring up to date: none once
    the search is over): rounds of :func:`~mecsim.channels.key_queue.candidates` from
    ``limit``, each round's stale uplink rows integrated over the uplink log (events up
    to ``n``, :func:`~mecsim.channels.kernels.integrate`), anchored at ``t``, refreshed
    (:func:`~mecsim.channels.kernels.refresh`) and pushed, as
    ``EventMedium._evaluate`` does them."""
    best = limit
    while True:
        best, found = candidates(hk, hr, hs, size, stamp, alive, up, at, n, logged_down,
                                 done_at, key, best, most)  # fmt: skip
        if len(found) == 0 or not _here(found, up, at, log_tx, n, table_stamp, tick, size[0],
                                        len(hk)):  # fmt: skip
            return best, found
        gain_row = np.searchsorted(stations, rx_cell[found])
        integrate(found, gain_row, log_tx, table, co, width, log_t, log_tx, log_sign, log_cell,
                  n, t, at, anchor, heard, rate, sinr, remaining, sinr_time, rx_cell, share_b,
                  share_p, noise_psd, fade, path_gain, interference_w, efficiency, min_sinr)  # fmt: skip
        for r in found:
            anchor[r], at[r] = t, n
        refresh(found, t, remaining, bits, done, heard, floor, share_b, share_p, noise_psd,
                fade, path_gain, interference_w, efficiency, min_sinr, start, block, coherence,
                deadline, rate, sinr, done_at, key, NO_CAP)  # fmt: skip
        push_rows(hk, hr, hs, size, found, key, stamp)
