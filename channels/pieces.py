"""The piecewise integral of an event-driven medium's receptions over its event log.

A mix-in of :class:`~mecsim.channels.event_medium.EventMedium`: a reception
brought up to date integrates its bits and SINR over the pieces since its anchor,
one from the anchor to the first event logged since, then one per event, the
interference after each event the anchor's plus the running sum of the events'
``P h(d) min(1, b / B)`` (+ for a transmitter turning on, - for one turning off);
all the rows of one call in one array pass.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mecsim.channels import fluid, kernels
from mecsim.channels.rows import Log, Rows

_NO_GAINS = np.zeros((1, 1))  # the gain table of an integration with no events

LINK = ("noise_psd", "fade", "path_gain", "interference_w", "efficiency", "min_sinr")
"""The columns of a row its rate depends on besides its share and interference."""


class Pieces:
    """Integration over the event log (a mix-in; see the module docstring)."""

    slots: Rows
    active_count: np.ndarray
    motion: object
    gain: Callable[[np.ndarray], np.ndarray]
    gain_of_squared: Callable[[np.ndarray], np.ndarray]
    _on_cell: np.ndarray
    _air_count: dict[bool, int]

    def _width(self) -> np.ndarray:
        raise NotImplementedError

    def _on_air(self, up: bool) -> np.ndarray:
        raise NotImplementedError

    def _power(self) -> np.ndarray:
        raise NotImplementedError

    def _sites(self) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    def _cells(self) -> np.ndarray:
        raise NotImplementedError

    def _co_matrix(self, cells: int) -> np.ndarray:
        raise NotImplementedError

    def _cell_bound(self) -> int:
        raise NotImplementedError

    def _station_gains(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _uplinks_heard(self, rx_cell: np.ndarray, band: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _heard(self, share_b: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError

    def _group_min(self, rows: np.ndarray, rate: np.ndarray) -> np.ndarray:
        """Each fixed-rate multicast's rows at its lowest rate (over axis 0)."""
        if not self.slots.any_worst:
            return rate
        worst = self.slots.worst[rows]
        if not worst.any():
            return rate
        groups = fluid.Groups(self.slots.a["tr"][rows])
        lowest = groups.reduce(np.minimum, rate)[groups.index]
        return np.where(worst if rate.ndim == 1 else worst[:, None], lowest, rate)

    def _integrate(self, rows: np.ndarray, log: Log, t: float) -> None:
        """``rows`` (one direction) up to ``t``: one piece from each anchor to the next
        event (or to ``t``, with no event since), then one per event, the interference
        after each the running sum of the events' contributions (a compiled loop,
        :func:`~mecsim.channels.kernels.integrate`, its rows spread over numba's threads)."""
        a = self.slots.a
        if self.slots.any_worst and self.slots.worst[rows].any():  # multicasts share pieces
            still = a["at"][rows] >= log.n
            quiet, moved = rows[still], rows[~still]
            span = t - a["anchor"][quiet]  # no event since: one piece
            a["remaining"][quiet] -= a["rate"][quiet] * span
            a["sinr_time"][quiet] += a["sinr"][quiet] * span
            if len(moved):
                self._pieces(moved, log, t)
            return
        first = int(a["at"][rows].min())
        ev_tx = log.tx[first : log.n]
        rx_cell = a["rx_cell"][rows]
        co = self._co_matrix(self._cell_bound())
        if first >= log.n:  # no event since any anchor: one piece each, no gains read
            gains, gain_row, ev_col = _NO_GAINS, np.zeros(len(rows), np.int64), log.tx
        elif self.slots.up[rows[0]]:  # uplinks: the per-tick [transmitter x station] table
            stations, gains = self._station_gains(ev_tx)
            gain_row, ev_col = np.searchsorted(stations, rx_cell), log.tx
        else:  # downlinks: a [row x radio] table of the (few) radios in the events
            radios = np.unique(ev_tx)
            shape = (len(rows), len(radios))
            gains = self._pair_gains(np.broadcast_to(rows[:, None], shape),
                                     np.broadcast_to(radios, shape),
                                     np.broadcast_to(self._on_cell[radios], shape))  # fmt: skip
            gain_row, ev_col = np.arange(len(rows)), np.zeros(log.n, np.int64)
            ev_col[first:] = np.searchsorted(radios, ev_tx)
            gains = gains.T  # [radio x row], as the uplinks' [transmitter x station]
        integrate = kernels.by_rows(len(rows), kernels.integrate, kernels.integrate_parallel)
        integrate(rows, gain_row, ev_col, np.ascontiguousarray(gains), co, self._width(), log.t,
                  log.tx, log.sign, log.cell, log.n, t, a["at"], a["anchor"], a["heard"],
                  a["rate"], a["sinr"], a["remaining"], a["sinr_time"], a["rx_cell"],
                  a["share_b"], a["share_p"], *(a[f] for f in LINK))  # fmt: skip

    def _pieces(self, rows: np.ndarray, log: Log, t: float) -> None:
        """:meth:`_integrate` on a [row x event] grid, for multicasts at their lowest rate
        (their rows share anchors, so each column is one piece of all)."""
        a = self.slots.a
        at = a["at"][rows]
        first = int(at.min())
        k = np.arange(first, log.n)
        ev_t, ev_tx = log.t[first : log.n], log.tx[first : log.n]
        counted = k[None, :] >= at[:, None]
        grid = np.broadcast_to(rows[:, None], counted.shape)
        delta = self._pair_gains(grid, np.broadcast_to(ev_tx, counted.shape),
                                 np.broadcast_to(log.cell[first : log.n], counted.shape))  # fmt: skip
        delta = delta * log.sign[first : log.n]
        band = np.minimum(1.0, a["share_b"][rows][:, None] / self._width()[ev_tx][None, :])
        heard = a["heard"][rows][:, None] + np.cumsum(np.where(counted, delta * band, 0.0), axis=1)
        until = np.append(ev_t[1:], t)
        span = np.where(counted, until - ev_t, 0.0)
        link = {f: a[f][rows][:, None] for f in LINK}
        b, p = a["share_b"][rows][:, None], a["share_p"][rows][:, None]
        rate, sinr = fluid.link_rates(link, b, p, heard)
        rate = self._group_min(rows, rate)
        lead = log.t[np.minimum(at, log.n - 1)] - a["anchor"][rows]
        a["remaining"][rows] -= a["rate"][rows] * lead + (rate * span).sum(axis=1)
        a["sinr_time"][rows] += a["sinr"][rows] * lead + (sinr * span).sum(axis=1)
        a["heard"][rows] = heard[:, -1]

    def _heard_now(self, rows: np.ndarray) -> np.ndarray:
        """The interference ``rows`` hear now: uplinks from the station board
        (:meth:`_uplinks_heard`); downlinks, for a few rows, summed directly over the radios
        on, for many, as the stepping medium sums them (:meth:`_heard`)."""
        a = self.slots.a
        if len(rows) > 16:
            return self._heard(a["share_b"][rows], rows)
        if len(rows) == 1 and self.slots.up[rows[0]] and self._air_count[True]:  # a start
            return self._uplinks_heard(a["rx_cell"][rows], a["share_b"][rows])
        heard = np.zeros(len(rows))
        for up in (True, False):
            mine = np.flatnonzero(self.slots.up[rows] == up)
            senders = self._on_air(up)
            if not len(mine) or not len(senders):
                continue
            band = a["share_b"][rows[mine]]
            if up:  # at base stations
                heard[mine] = self._uplinks_heard(a["rx_cell"][rows[mine]], band)
                continue
            shape = (len(mine), len(senders))
            grid = np.broadcast_to(rows[mine][:, None], shape)
            g = self._pair_gains(grid, np.broadcast_to(senders, shape),
                                 np.broadcast_to(self._on_cell[senders], shape))  # fmt: skip
            heard[mine] = (g * np.minimum(1.0, band[:, None] / self._width()[senders])).sum(axis=1)
        return heard

    def _pair_gains(self, rows: np.ndarray, tx: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """``P h(d)`` from transmitter ``tx`` to the receiver of row ``rows``, pair by pair
        (one direction), zero where the two cells are not co-channel."""
        a = self.slots.a
        rx_cell = a["rx_cell"][rows]
        co = self._co_matrix(self._cell_bound())
        hears = co[rx_cell, cell]
        if self.slots.up[rows.flat[0]]:
            stations, gains = self._station_gains(tx.ravel())
            which = np.searchsorted(stations, rx_cell)
            return np.where(hears, gains[tx, which], 0.0)
        x, y = self._sites()[:2]  # downlinks: from the cells' radios, which do not move
        dx, dy = x[tx] - a["rx"][rows], y[tx] - a["ry"][rows]
        if self.motion is not None:
            g = self.gain_of_squared(np.maximum(dx * dx + dy * dy, 1e-18))
        else:
            g = self.gain(np.maximum(np.hypot(dx, dy), 1e-9))
        return np.where(hears, g * self._power()[tx], 0.0)
