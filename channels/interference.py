"""Interference between cells on a medium: who hears whom, and how much.

:class:`Interference` is a mix-in of :class:`~mecsim.channels.medium.Medium`:
from where the transmitters are (their sites, and moving clients' positions
and cells each tick) and which are on the air, the interference
every open reception hears, ``P h(d) min(1, b / B)`` summed over the
co-channel transmitters of other cells in the same direction. Uplinks are
decoded at their cell's base station, so their interference is summed per
station from a [transmitter x station] gain table kept per tick (a row computed
when a tick first asks for it); downlinks at each client, over the (few) cell radios.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType

import numpy as np

from mecsim.channels.fluid import Slots


@functools.cache
def compiled() -> ModuleType:
    """:mod:`mecsim.channels.kernels` (numba), imported on first use: one cell builds no
    medium and never needs it."""
    from mecsim.channels import kernels

    return kernels


class Interference:
    """The interference each open reception of a medium hears (a mix-in)."""

    slots: Slots
    active_count: np.ndarray
    co_channel: Callable[[int, int], bool]
    gain: Callable[[np.ndarray], np.ndarray]
    gain_of_squared: Callable[[np.ndarray], np.ndarray]
    gain_form: tuple[float, float, int] | None
    _co: np.ndarray | None
    _gains: tuple | None
    _one_band: tuple[float | None] | None
    _stations: dict[int, tuple[float, float]]
    _tick: int
    _table: tuple | None
    _band_order: tuple[np.ndarray, np.ndarray] | None
    motion: object
    sites: dict
    transmitters: list
    serving: np.ndarray | None
    _tx_cells: np.ndarray | None
    _static: tuple[np.ndarray, ...] | None
    _bound: tuple | None
    _uplink_index: tuple | None
    _index: dict[int, int]
    _placed: np.ndarray
    client_x: np.ndarray
    client_y: np.ndarray
    uplink_of: dict

    def _cells(self) -> np.ndarray:
        """Every transmitter's cell now (a moving client's uplink: its serving cell; a
        handover updates it in place, :meth:`_serve`)."""
        _, _, cell, _, client, _, _ = self._sites()
        if self.motion is None:
            return cell
        if self._tx_cells is None:
            assert self.serving is not None
            self._tx_cells = np.where(client >= 0, self.serving[np.maximum(client, 0)], cell)
        return self._tx_cells

    def _cell_bound(self) -> int:
        """One more than the highest cell a transmitter can be in (cached with the sites)."""
        sites = self._sites()
        if self._bound is None or self._bound[0] is not sites:
            n = int(sites[2].max(initial=0)) + 1
            if self.motion is not None:
                n = max(n, len(self.motion.cells))  # type: ignore[attr-defined]
            self._bound = (sites, n)
        return self._bound[1]

    def _senders(self, up: bool) -> np.ndarray:
        """The transmitters of direction ``up`` on the air, in order."""
        return np.flatnonzero((self.active_count > 0) & (self._sites()[3] == up))

    def _tx_xy(self, tx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where transmitters ``tx`` are in this tick (moving uplinks: their clients)."""
        x, y, _, _, client, _, _ = self._sites()
        x, y = x[tx], y[tx]
        if self.motion is not None:
            moving = client[tx] >= 0
            if moving.any():
                x[moving], y[moving] = self._client_xy(client[tx][moving])
        return x, y

    def position(self, client: int) -> tuple[float, float]:
        """Where moving ``client`` is in this tick, m."""
        x, y = self._client_xy(np.array([client]))
        return float(x[0]), float(y[0])

    def _client_xy(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where moving ``clients`` are in this tick (each computed once a tick)."""
        self._locate(compiled().claim(clients, self._placements(), self._tick))
        return self.client_x[clients], self.client_y[clients]

    def _placements(self) -> np.ndarray:
        """Each moving client's stamp: the tick its position (``client_x``, ``client_y``)
        is of."""
        motion = self.motion
        assert motion is not None
        if len(self._placed) != len(motion.initial):
            n = len(motion.initial)
            self.client_x, self.client_y, self._placed = np.zeros(n), np.zeros(n), np.full(n, -2)
        return self._placed

    def _locate(self, clients: np.ndarray) -> None:
        """Compute where ``clients`` (just claimed, stamped this tick) are in this tick."""
        if not len(clients):
            return
        motion = self.motion
        assert motion is not None
        t = self._tick * motion.tick_s
        if motion.positions_of is not None:
            x, y = motion.positions_of(t, clients)
        else:
            x, y = (v[clients] for v in motion.positions(t))
        self.client_x[clients], self.client_y[clients] = x, y

    def _serve(self, client: int, target: int) -> None:
        """``client`` is served by cell ``target`` from now on (a handover)."""
        assert self.serving is not None
        self.serving[client] = target
        if self._tx_cells is not None:  # its uplink's cell
            self._tx_cells[self._uplinks()[client]] = target

    def _serve_all(self, clients: np.ndarray, targets: np.ndarray) -> None:
        """:meth:`_serve` for each of ``clients`` in turn (a client listed twice ends at its
        last target), in array passes."""
        assert self.serving is not None
        _, from_end = np.unique(clients[::-1], return_index=True)
        last = len(clients) - 1 - from_end
        clients, targets = clients[last], targets[last]
        self.serving[clients] = targets
        if self._tx_cells is not None:  # their uplinks' cells
            self._tx_cells[self._uplinks()[clients]] = targets

    def _uplinks(self) -> np.ndarray:
        """Each client's uplink transmitter (cached with the sites)."""
        sites = self._sites()
        if self._uplink_index is None or self._uplink_index[0] is not sites:
            client = sites[4]
            index = np.full(int(client.max(initial=-1)) + 1, -1, dtype=np.int64)
            index[client[client >= 0]] = np.flatnonzero(client >= 0)
            self._uplink_index = (sites, index)
        return self._uplink_index[1]

    def _sites(self) -> tuple[np.ndarray, ...]:
        """Every transmitter's site (x, y, cell, uplink, client) and its power and band."""
        if self._static is None:
            sites = [self.sites[id(tx)] for tx in self.transmitters]
            self._static = (
                np.array([s.x_m for s in sites]), np.array([s.y_m for s in sites]),
                np.array([s.cell for s in sites], dtype=np.int64),
                np.array([s.direction == "up" for s in sites]),
                np.array([s.client for s in sites], dtype=np.int64),
                np.array([tx.power_w for tx in self.transmitters]),
                np.array([tx.bandwidth_hz for tx in self.transmitters]),
            )  # fmt: skip
        return self._static

    def _power(self) -> np.ndarray:
        return self._sites()[5]

    def _width(self) -> np.ndarray:
        return self._sites()[6]

    def _co_matrix(self, cells: int) -> np.ndarray:
        if self._co is None or len(self._co) < cells:
            self._co = np.array([[self.co_channel(a, b) and a != b for b in range(cells)]
                                 for a in range(cells)], dtype=bool)  # fmt: skip
        return self._co

    def _heard(self, share_b: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """The interference every open reception (or those at ``index``, holding
        ``share_b``) hears now: ``P h(d) min(1, b / B)`` over the co-channel transmitters of
        other cells in the same direction that are on."""
        a = self.slots.a
        index = np.arange(len(self.slots)) if index is None else index
        up, tx = self.slots.up[index], a["tx"][index]
        heard = np.zeros(len(index))
        x, y = self._sites()[:2]
        cell = self._cells()
        power, width = self._power(), self._width()
        rx_cell = cell[tx]
        co = self._co_matrix(self._cell_bound())
        for direction in (True, False):
            mine = np.flatnonzero(up == direction)
            senders = self._senders(direction)
            if not len(mine) or not len(senders):
                continue
            if direction:  # uplinks: one receiver per base station
                heard[mine] = self._at_stations(rx_cell[mine], share_b[mine], senders, cell, co)
                continue
            rows = index[mine]
            if self.motion is not None:  # gains of every client to every radio, per tick
                heard[mine] = self._radios_heard(rows, rx_cell[mine], share_b[mine], senders)
                continue
            d = np.hypot(x[senders][None, :] - a["rx"][rows][:, None],
                         y[senders][None, :] - a["ry"][rows][:, None])  # fmt: skip
            hears = co[rx_cell[mine]][:, cell[senders]]
            g = np.where(hears, self.gain(np.where(hears, np.maximum(d, 1e-9), 1.0)), 0.0)
            g = g * power[senders][None, :]
            share = np.minimum(1.0, share_b[mine][:, None] / width[senders][None, :])
            heard[mine] = (g * share).sum(axis=1)
        return heard

    def _radios_heard(
        self, rows: np.ndarray, rx_cell: np.ndarray, band: np.ndarray, senders: np.ndarray
    ) -> np.ndarray:
        """The interference downlink ``rows`` of moving clients (in cells ``rx_cell``,
        holding ``band``) hear from the cell radios ``senders`` on the air, from the tick's
        [client x radio] gains (:func:`~mecsim.channels.kernels.radios_heard`)."""
        clients = self.slots.a["client"][rows]
        radios, table = self._radio_gains(clients)
        cell, co = self._cells(), self._co_matrix(self._cell_bound())
        return compiled().radios_heard(clients, rx_cell, band, table,
                                       np.searchsorted(radios, senders), cell[senders],
                                       self._width()[senders], co)  # fmt: skip

    def _radio_gains(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the cell radios' transmitter indices; [client x radio] ``P h(d)`` from each
        radio to each moving client), valid for ``clients``: a client's row is computed
        the first time a tick asks for it."""
        size = len(self.serving), len(self._power())  # type: ignore[arg-type]
        x, y, _, up = self._sites()[:4]  # the radios do not move
        if self._table is None or self._table[0] != size:  # allocated once, rows stamped
            radios = np.flatnonzero(~up)
            at = np.stack([x[radios], y[radios]], axis=1)
            self._table = (size, radios, np.empty((size[0], len(radios))), np.full(size[0], -2), at)
        _, radios, table, stamp, at = self._table
        missing = compiled().claim(clients, stamp, self._tick)  # each once, now stamped
        if len(missing):
            squared = compiled().squared_distances(*self._client_xy(missing), at)
            power = self._power()[radios]
            if self.gain_form is not None:  # the same products, compiled
                table[missing] = compiled().received_powers(squared, power, *self.gain_form)
            else:
                table[missing] = self.gain_of_squared(squared) * power[None, :]
        return radios, table

    def _station_gains(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the base stations' cells, sorted; [transmitter x station] ``P h(d)``), valid for
        the transmitters ``columns``: a transmitter's row is computed the first time it is
        asked for in a tick (once with nothing moving), so only transmitters on the air
        cost. A row holds one transmitter's gains to every station side by side: a tick
        fills and reads ~1,000 rows of a table of 100,000 (station-major, each gain was a
        cache line of its own)."""
        if not self._gains_current():  # allocated once, rows stamped
            key = (len(self._stations), len(self._power()))
            cells = np.array(sorted(self._stations), dtype=np.int64)
            xy = np.array([self._stations[c] for c in cells.tolist()]).reshape(-1, 2)
            self._gains = (key, cells, np.empty((key[1], len(cells))), np.full(key[1], -2), xy)
        _, cells, table, stamp, xy = self._gains
        kernels = compiled()
        if self.motion is not None and self.gain_form is not None:  # one compiled pass
            x, y, _, _, client, power, _ = self._sites()
            missing, clients = kernels.claim_senders(columns, stamp, self._tick, client,
                                                     self._placements())  # fmt: skip
            self._locate(clients)
            fill = kernels.by_rows(len(missing), kernels.fill_sender_gains,
                                   kernels.fill_sender_gains_parallel)  # fmt: skip
            fill(table, missing, x, y, client, self.client_x, self.client_y, xy, power,
                 *self.gain_form)  # fmt: skip
            return cells, table
        missing = kernels.claim(columns, stamp, self._tick)  # each once, now stamped
        if len(missing):
            x, y = self._tx_xy(missing)
            if self.gain_form is not None:  # the same products, in one compiled pass
                kernels.fill_gains(table, missing, x, y, xy, self._power(), *self.gain_form)
            else:
                g = self.gain_of_squared(kernels.squared_distances(x, y, xy))
                kernels.fill_rows(table, missing, g, self._power())
        return cells, table

    def _gains_current(self) -> bool:
        """Whether the stations' gain table is for the stations and transmitters there are."""
        return self._gains is not None and self._gains[0] == (len(self._stations),
                                                               len(self._power()))  # fmt: skip

    def _at_stations(
        self, rx_cell: np.ndarray, band: np.ndarray, senders: np.ndarray, cell: np.ndarray,
        co: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """Uplink interference at each reception's base station: ``sum_u P_u h(d_u) min(1,
        b / B_u)`` over the co-channel uplinks ``senders``. Bands all equal: one sum per
        station; else prefix sums over the senders sorted by band (those of band <= b count
        fully, wider ones by b / B)."""
        stations, gains = self._station_gains(senders)
        which = np.searchsorted(stations, rx_cell)
        if self._uplink_band is not None:  # every uplink has the same band
            at = np.ascontiguousarray(gains[senders].T)  # [station x sender]
            g = (at * co[stations][:, cell[senders]]).sum(axis=1)
            return g[which] * np.minimum(1.0, band / self._uplink_band)
        senders = self._in_band_order(senders)
        return self._prefix_sums(stations, which, band, senders, cell[senders], co, gains)

    def _in_band_order(self, senders: np.ndarray, on: np.ndarray | None = None) -> np.ndarray:
        """Uplinks ``senders`` (in order; ``on``: the same as a mask over the transmitters, if
        the caller has it) sorted by band (stable): as they are when every uplink has one
        band."""
        if self._uplink_band is not None:
            return senders
        order, rank = self._by_band()
        if 8 * len(senders) < len(order):  # few on the air: sort their places in the order
            return order[np.sort(rank[senders])]
        if on is None:  # many: pick them out of every transmitter
            on = np.zeros(len(order), dtype=bool)
            on[senders] = True
        return order[on[order]]

    def _prefix_sums(
        self, stations: np.ndarray, which: np.ndarray, band: np.ndarray, senders: np.ndarray,
        sender_cell: np.ndarray, co: np.ndarray, gains: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """:meth:`_at_stations` over ``senders`` sorted by band: per station, prefix sums of
        ``P h`` and ``P h / B`` over them; a reception at station row ``which`` holding
        ``band`` counts those of band <= b fully, the wider ones by b / B."""
        widths = self._width()[senders]
        g = np.ascontiguousarray(gains[senders].T) * co[stations][:, sender_cell]
        zero = np.zeros((len(stations), 1))
        full = np.concatenate([zero, np.cumsum(g, axis=1)], axis=1)
        scaled = np.concatenate([zero, np.cumsum(g / widths, axis=1)], axis=1)
        k = np.searchsorted(widths, band, side="right")
        return full[which, k] + band * (scaled[which, -1] - scaled[which, k])

    def _by_band(self) -> tuple[np.ndarray, np.ndarray]:
        """(every transmitter's index in order of its band, stable; each one's place in
        that order)."""
        if self._band_order is None:
            order = np.argsort(self._width(), kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            self._band_order = (order, rank)
        return self._band_order

    @property
    def _uplink_band(self) -> float | None:
        """The band of every uplink transmitter, if they all have the same."""
        if self._one_band is None:
            _, _, _, up, _, _, width = self._sites()
            bands = np.unique(width[up])
            self._one_band = (float(bands[0]) if len(bands) == 1 else None,)
        return self._one_band[0]
