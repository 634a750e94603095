"""The medium driven by events: each reception touched only when it may change the clock.

:class:`~mecsim.channels.medium.Medium` steps every open reception at every change
point; with every client on the air each of the ~3N change points of a round
touches ~N receptions, so a round costs N^2 numpy element operations and as many
array passes as change points. :class:`EventMedium` keeps the same physics and the
same piecewise integration, and does the work lazily:

- Transmitters turning on and off go into a log per direction (time, transmitter,
  +1/-1, its cell). A reception remembers the interference it held when it was
  last brought up to date (its anchor) and how much of the log that counted; the
  pieces since are integrated in one array pass when it is next touched: the
  interference after each event is the anchor's plus the running sum of the
  events' ``P h(d) min(1, b/B)``, each piece at the rate of its interference.
- A reception cannot end before its *key*: its bits at the rate it would have
  with no interference from other cells, a bound that events do not move. The
  next change point is found by bringing up to date only the receptions whose
  key falls before the best candidate so far; the others cannot change anything
  before it.
- A reception's own changes (its transmitter's share, its fading block, a tick
  of moving clients, a handover) bring it up to date first, as the stepping
  medium's change points do; a tick brings every reception up to date and
  empties the logs.

Energy is kept per transmitter as a checkpoint and the time since: ``P / n`` per
open transmission while the count ``n`` holds. Tables agree with the stepping
medium's to rounding (``tests/net/test_event_medium_runs.py`` runs both).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mecsim.channels import fluid, kernels, tick_pass
from mecsim.channels.change_search import search
from mecsim.channels.key_queue import KeyQueue
from mecsim.channels.medium import Medium, Site
from mecsim.channels.pieces import LINK, Pieces
from mecsim.channels.rows import Log, Rows
from mecsim.channels.sharing import (
    _DONE,
    Reception,
    SharedTransmitter,
    Transmission,
)
from mecsim.channels.station_board import StationBoard

_FIRST = 32  # receptions brought up to date first when the next change point is unknown
_REFRESHED = ("remaining", "bits", "done", "heard", "floor", "share_b", "share_p", *LINK,
              "start", "block", "coherence", "deadline", "rate", "sinr", "done_at",
              "key")  # fmt: skip
"""The row columns :func:`~mecsim.channels.kernels.refresh` reads and writes, in its order."""
_SEARCHED = ("anchor", "heard", "floor", "rate", "sinr", "remaining", "sinr_time", "rx_cell",
             "share_b", "share_p", *LINK, "bits", "done", "start", "block", "coherence",
             "deadline")  # fmt: skip
"""Those :func:`~mecsim.channels.change_search.search` takes after the log and ``t``."""
_FLOORED = ("anchor", "remaining", "bits", "done", "floor", "share_b", "share_p", *LINK,
            "start", "block", "coherence", "deadline", "key")  # fmt: skip
"""Those :func:`~mecsim.channels.tick_pass.floored` takes after the receivers' cells."""
_NONE = np.zeros(0, dtype=np.int64)  # no rows
_BROUGHT = ("at", "anchor", "heard", "rate", "sinr", "remaining", "sinr_time", "rx_cell",
            "share_b", "share_p", *LINK)  # fmt: skip
"""The row columns :func:`~mecsim.channels.tick_pass.bring_and_aim` integrates, in its order."""


class EventMedium(Medium, Pieces):
    """A :class:`Medium` whose receptions are brought up to date only when they matter
    (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots: Rows = Rows()  # type: ignore[assignment]
        self.logs = {True: Log(), False: Log()}
        self._spent_at = np.zeros(0)
        """When each transmitter's energy (``_energy``) was last brought up to date."""
        self._air = {True: np.zeros(0, dtype=bool), False: np.zeros(0, dtype=bool)}
        """Per direction, whether each transmitter is on the air."""
        self._air_count = {True: 0, False: 0}
        """Per direction, how many transmitters are on the air."""
        self._air_list: dict[bool, tuple[int, np.ndarray]] = {}
        """Per direction, (the version it was taken at, the transmitters on the air)."""
        self._on_cell = np.zeros(0, dtype=np.int64)
        """The cell each transmitter was in when it turned on."""
        self._version = 0
        """Counts changes of state (the next change point is cached per instant and version)."""
        self._next: tuple | None = None
        self._queue = KeyQueue()
        """The open rows in key order (pushed at each refresh)."""
        self._board: StationBoard | None = None
        """Uplink interference at the stations (taken when first asked for after a change)."""
        self._station_xy: np.ndarray | None = None
        """The base stations' positions, [cell x 2] (with motion)."""
        self._columns: tuple[dict, dict] = ({}, {})
        """(the rows' arrays, the column tuples :meth:`_row_columns` gave) while they hold."""

    def add_all(self, placed: list[tuple[SharedTransmitter, Site]]) -> list[SharedTransmitter]:
        self._spent_at = np.concatenate([self._spent_at, np.full(len(placed), self.now)])
        cells = np.array([site.cell for _, site in placed], dtype=np.int64)
        self._on_cell = np.concatenate([self._on_cell, cells])
        self._air = {up: np.concatenate([on, np.zeros(len(placed), dtype=bool)])
                     for up, on in self._air.items()}  # fmt: skip
        return super().add_all(placed)

    def _senders(self, up: bool) -> np.ndarray:
        return self._on_air(up)

    def _on_air(self, up: bool) -> np.ndarray:
        """The transmitters of direction ``up`` on the air, in order (taken from the mask
        once per change: a start or end only flips its entry)."""
        taken = self._air_list.get(up)
        if taken is None or taken[0] != self._version:
            taken = self._air_list[up] = (self._version, np.flatnonzero(self._air[up]))
        return taken[1]

    def _at_stations(
        self, rx_cell: np.ndarray, band: np.ndarray, senders: np.ndarray, cell: np.ndarray,
        co: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """:meth:`_uplinks_heard` (``senders`` are the uplinks on the air, as it counts)."""
        return self._uplinks_heard(rx_cell, band)

    def _uplinks_heard(self, rx_cell: np.ndarray, band: np.ndarray) -> np.ndarray:
        """The interference uplink receptions decoded in cells ``rx_cell`` holding ``band``
        hear now: the station board's sums and the events logged since
        (:mod:`~mecsim.channels.station_board`)."""
        log, co = self.logs[True], self._co_matrix(self._cell_bound())
        if not self._gains_current():
            self._station_gains(_NONE)  # a gain table for the stations there are now
        board = self._board
        if board is None or not board.holds(self._tick, self._gains, log.n):
            senders = self._in_band_order(self._on_air(True), self._air[True])
            stations, gains = self._station_gains(senders)
            full, scaled, bands, ends = kernels.station_tables(
                stations, senders, self._width(), self._on_cell, co, gains)  # fmt: skip
            board = self._board = StationBoard(self._tick, self._gains, log.n, len(senders),
                                               bands, ends, full, scaled)  # fmt: skip
        stations, gains = self._station_gains(log.tx[board.first : log.n])
        heard = kernels.by_rows(len(rx_cell), kernels.station_heard, kernels.station_heard_parallel)
        return heard(
            np.searchsorted(stations, rx_cell), rx_cell, band, board.bands, board.ends, board.full,
            board.scaled, gains, co, self._width(), log.tx, log.sign, log.cell, board.first, log.n,
        )  # fmt: skip

    # --- transmissions ---------------------------------------------------------------------
    def _energy_now(self, x: int) -> float:
        """Transmitter ``x``'s energy per open transmission, up to now."""
        n = int(self.active_count[x])
        spent = float(self._energy[x])
        return spent + self._power()[x] / n * (self.now - self._spent_at[x]) if n else spent

    def _count(self, x: int, change: int) -> None:
        """Transmitter ``x`` gains or loses a transmission now: its receptions' shares
        change, and it turns on or off in its direction's log."""
        before = int(self.active_count[x])
        keeps = before > 0 and before + change > 0  # else it has no rows (none open)
        rows = kernels.rows_where(self.slots.live, self.slots.a["tx"], x) if keeps else _NONE
        if len(rows):  # refreshed below, with their new shares
            self._evaluate(rows, self.now, refresh=False)
        self._energy[x], self._spent_at[x] = self._energy_now(x), self.now
        self.active_count[x] = before + change
        self._version += 1
        up = bool(self._sites()[3][x])
        if before == 0:
            self._on_cell[x] = int(self._cells()[x])
            self.logs[up].append(self.now, x, 1.0, int(self._on_cell[x]))
            self._air[up][x] = True
            self._air_count[up] += 1
        elif before + change == 0:
            self.logs[up].append(self.now, x, -1.0, int(self._on_cell[x]))
            self._air[up][x] = False
            self._air_count[up] -= 1
        if len(rows):
            a = self.slots.a
            a["share_b"][rows] = self._width()[x] / (before + change)
            a["share_p"][rows] = self._power()[x] / (before + change)
            a["heard"][rows], a["floor"][rows] = self._heard_now(rows), 0.0  # of another band
            self._refresh(rows, self.now)

    def _add_slots(self, tr: int, transmission: Transmission, receptions: list[Reception]) -> None:
        x = self._tr_tx[tr]
        up, cell = bool(self._sites()[3][x]), int(self._cells()[x])
        if self.motion is None:
            site = self.site(transmission.via)  # type: ignore[arg-type]
            rx = [self.receiver(site, r) for r in receptions]
            if up and receptions and cell not in self._stations:
                self._stations[cell] = rx[0]
        else:  # placed by _aim below
            rx = [(math.nan, math.nan)] * len(receptions)
        self._tr_open[tr] += len(receptions)
        if not receptions:
            return
        self._version += 1
        a = self.slots.a
        if transmission.worst:  # the group's rows share one anchor
            group = kernels.rows_where(self.slots.live, a["tr"], tr)
            if len(group):  # refreshed with the new rows
                self._evaluate(group, self.now, refresh=False)
        n = int(self.active_count[x])
        columns: dict[str, object] = dict(
            fluid.reception_row(receptions[0], *rx[0], self.now)  # one: scalars, as Rows takes
            if len(receptions) == 1 else fluid.reception_fields(receptions, rx, self.now))  # fmt: skip
        columns.update(tx=x, tr=tr, up=up, worst=transmission.worst, rx_cell=cell,
                       floor=0.0, at=self.logs[up].n, anchor=self.now,
                       share_b=self._width()[x] / n, share_p=self._power()[x] / n)  # fmt: skip
        rows = self.slots.add(receptions, columns)
        a = self.slots.a  # the arrays grow
        if self.motion is not None:
            self._aim(rows)
        a["heard"][rows] = self._heard_now(rows)
        self._refresh(rows, self.now)

    def write_back(self) -> None:
        rows = self.slots.index()
        if len(rows):
            self._evaluate(rows, self.now)
            self.slots.write_back(rows)
        for tr, transmission in self.transmissions.items():
            now = self._energy_now(self._tr_tx[tr])
            transmission.energy_j += now - self._tr_energy[tr]
            self._tr_energy[tr] = now

    # --- bringing receptions up to date ----------------------------------------------------
    def _groups(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` with every open row of each fixed-rate multicast among them."""
        if not self.slots.any_worst:
            return rows
        worst = rows[self.slots.worst[rows]]
        if not len(worst):
            return rows
        a = self.slots.a
        live = self.slots.live
        mates = np.flatnonzero(live & np.isin(a["tr"][: len(live)], a["tr"][worst]))
        return np.union1d(rows, mates)

    def _refresh(self, rows: np.ndarray, t: float) -> None:
        """Rates, next events and keys of ``rows``, anchored at ``t`` with their ``heard``
        (:func:`~mecsim.channels.kernels.refresh`; a fixed-rate multicast's rows again, at
        their group's lowest rate)."""
        rows = self._groups(rows)
        self._rerate(rows, t)
        self._queue.push(rows, self.slots.a["key"], self.slots.a["stamp"], self.slots.live)

    def _rerate(self, rows: np.ndarray, t: float) -> None:
        """:meth:`_refresh` of ``rows`` (with their multicast mates), not yet pushed."""
        fields = self._row_columns(_REFRESHED)
        refresh = kernels.by_rows(len(rows), kernels.refresh, kernels.refresh_parallel)
        refresh(rows, t, *fields, kernels.NO_CAP)
        if self.slots.any_worst and self.slots.worst[rows].any():
            refresh(rows, t, *fields, self._group_min(rows, self.slots.a["rate"][rows]))

    def _row_columns(self, names: tuple[str, ...]) -> tuple:
        """The rows' arrays ``names`` (``"done"``: the fraction of its bits left at which a
        row is done), kept until the arrays grow."""
        a = self.slots.a
        if self._columns[0] is not a:
            self._columns = (a, {})
        given = self._columns[1]
        if names not in given:
            given[names] = tuple(_DONE if f == "done" else a[f] for f in names)
        return given[names]

    def _evaluate(self, rows: np.ndarray, t: float, refresh: bool = True) -> None:
        """Bring ``rows`` (and their multicast mates) up to ``t``: their bits and SINR
        integrated over the pieces since their anchors; then re-anchored at ``t`` (and
        refreshed, unless the caller refreshes them itself once it has changed them)."""
        rows = self._groups(rows)
        a = self.slots.a
        for up in (True, False):
            mine = rows[self.slots.up[rows] == up]
            if not len(mine):
                continue
            log = self.logs[up]
            self._integrate(mine, log, t)
            a["anchor"][mine], a["at"][mine] = t, log.n
        if refresh:
            self._refresh(rows, t)

    # --- the clock -------------------------------------------------------------------------
    def _next_event(self, t: float, limit: float) -> float:
        """The next change point after ``t`` (at most ``limit``): the receptions whose key
        falls before the best candidate so far brought up to date, the earliest first."""
        state = (self.logs[True].n, self.logs[False].n, self._version)
        if self._next is not None and self._next[0] == state:
            best, searched = self._next[1:]
            if best < searched or limit <= searched:
                return min(best, limit)
        best, slots = limit, self.slots
        while True:
            a, logged = slots.a, (self.logs[True].n, self.logs[False].n)
            if self._searchable():  # the uplink rows it meets brought up to date compiled
                best, rows = self._search(t, best)
            else:
                best, rows = self._queue.candidates(a["stamp"], slots.alive, slots.up, a["at"],
                                                    logged, a["done_at"], a["key"], best,
                                                    _FIRST)  # fmt: skip
            if not len(rows):
                self._next = (state, best, limit)
                return best
            self._evaluate(rows, t)  # in key order

    def _searchable(self) -> bool:
        """Whether :func:`~mecsim.channels.change_search.search` may run: no multicast
        rows, and the stations' gain table is the current one."""
        return not self.slots.any_worst and self._gains_current()

    def _search(self, t: float, limit: float) -> tuple[float, np.ndarray]:
        """:func:`~mecsim.channels.change_search.search` on this medium's state."""
        a, slots, log, queue = self.slots.a, self.slots, self.logs[True], self._queue
        _, stations, table, table_stamp, _ = self._gains  # type: ignore[misc]
        return search(queue.key, queue.row, queue.stamp, queue.size, a["stamp"], slots.alive,
                      slots.up, a["at"], self.logs[False].n, a["done_at"], a["key"], limit,
                      _FIRST, stations, table, table_stamp, self._tick,
                      self._co_matrix(self._cell_bound()), self._width(), log.t, log.tx,
                      log.sign, log.cell, log.n, t, *self._row_columns(_SEARCHED))  # fmt: skip

    def _horizon(self, t: float, limit: float) -> float:
        return self._next_event(t, self._next_motion(t, limit))

    def _open_clients(self) -> list[int]:
        return self.slots.a["client"][self.slots.index()].tolist()

    def _step(self, t: float, step: float) -> list[Reception]:
        """To ``t + step``, the next change point: the receptions that end, fail or start a
        fading block there (all brought up to date at ``t``) step as the stepping medium's
        do; the others stay anchored."""
        a, now = self.slots.a, t + step
        tol = 1e-12 * max(1.0, abs(now))
        slots, logged = self.slots, (self.logs[True].n, self.logs[False].n)
        rows = self._groups(self._queue.ending(a["stamp"], slots.alive, slots.up, a["at"], logged,
                                               a["done_at"], a["remaining"], a["bits"], _DONE,
                                               a["key"], now + tol))  # fmt: skip
        self.now = now
        if not len(rows):
            return []
        self._version += 1
        # exact rows, anchored before t (no event since): to t, then the step
        done, failed, end, over = kernels.step_rows(
            rows, t, step, _DONE, *(a[f] for f in ("anchor", "remaining", "bits", "sinr_time",
            "rate", "sinr", "deadline", "start", "block", "coherence"))
        )  # fmt: skip
        for i in rows[over].tolist():  # a new fading block
            a["fade"][i] = self.slots.objects[i].track.gain(int(a["block"][i]))  # type: ignore[union-attr]
        closing = rows[done]
        trs, ends, fails = a["tr"][closing].tolist(), end[done].tolist(), failed[done].tolist()
        gone = self.slots.remove(closing)
        for r, e, f in zip(gone, ends, fails, strict=True):
            r.end, r.failed = e, f
            if not f:
                r.remaining = 0.0
        staying = rows[~done]
        if len(staying):
            self._refresh(staying, now)
        for tr, e in zip(trs, ends, strict=True):
            self._tr_open[tr] -= 1
            self._tr_last[tr] = max(self._tr_last[tr], e)
            if self._tr_open[tr] == 0:
                self._end_transmission(tr, self._tr_last[tr])
        return gone

    # --- moving clients --------------------------------------------------------------------
    def _aim(self, index: np.ndarray) -> None:
        """:meth:`Medium._aim <mecsim.channels.medium.Medium._aim>` in one compiled pass
        (:func:`~mecsim.channels.kernels.aim`), then the path gains."""
        assert self.motion is not None and self.serving is not None
        a = self.slots.a
        cx, cy = self._client_xy(a["client"][index])
        aim = kernels.by_rows(len(index), kernels.aim, kernels.aim_parallel)
        d = aim(index, self.slots.up, a["client"], a["tx"], self.serving, self._stations_xy(),
                *self._sites()[:2], cx, cy, a["rx"], a["ry"])  # fmt: skip
        a["path_gain"][index] = self.gain(d)

    def _stations_xy(self) -> np.ndarray:
        """The cells' base stations, [cell x 2] (m)."""
        if self._station_xy is None:
            assert self.motion is not None
            self._station_xy = np.asarray(self.motion.cells, dtype=float).reshape(-1, 2)
        return self._station_xy

    def _new_tick(self, k: int, t: float) -> None:
        rows = self.slots.index()
        self.slots.a["floor"][rows] = 0.0  # the last tick's floors hold until now
        if self._compiled_tick(rows, k, t):
            return
        if len(rows):  # at the old tick's gains; refreshed at the new tick's below
            self._evaluate(rows, t, refresh=False)
        self._version += 1
        self._tick = k  # clients' positions: filled as asked for (_client_xy)
        for log in self.logs.values():
            log.n = 0
        if len(rows):
            self.slots.a["at"][rows] = 0
            self._aim(rows)
            self.slots.a["heard"][rows] = self._heard_now(rows)
            self._refresh(rows, t)

    def _compiled_tick(self, rows: np.ndarray, k: int, t: float) -> bool:
        """:meth:`_new_tick` with its uplink rows in two compiled calls
        (:mod:`~mecsim.channels.tick_pass`), the downlink rows as there, where the rows are
        over 16 (:meth:`_heard_now` sums them all), the path loss is products and every
        uplink piece's gains are in the table; False, having done nothing, elsewhere."""
        a, log, slots = self.slots.a, self.logs[True], self.slots
        if len(rows) <= 16 or self.gain_form is None or not self._searchable():
            return False
        _, stations, table, stamp, _ = self._gains  # type: ignore[misc]
        up = slots.up[rows]
        ups, downs = rows[up], rows[~up]
        if not len(ups) or not kernels.stamped(ups, a["at"], log.tx, log.n, stamp, self._tick):
            return False
        if len(downs):  # at the old tick's gains
            self._integrate(downs, self.logs[False], t)
            a["anchor"][downs], a["at"][downs] = t, 0
        n, self._tick = log.n, k
        self._version += 1
        for each in self.logs.values():
            each.n = 0
        cx, cy = self._client_xy(a["client"][rows])
        co, width = self._co_matrix(self._cell_bound()), self._width()
        d = tick_pass.bring_and_aim(ups, rows, n, t, stations, table, co, width, log.t, log.tx,
                                    log.sign, log.cell, *(a[f] for f in _BROUGHT), slots.up,
                                    a["client"], a["tx"], self.serving, self._stations_xy(),
                                    *self._sites()[:2], cx, cy, a["rx"], a["ry"])  # fmt: skip
        a["path_gain"][rows] = self.gain(d)
        rx_cell, band = self._cells()[a["tx"][rows]], a["share_b"][rows]
        senders = self._in_band_order(self._on_air(True), self._air[True])
        stations, gains = self._station_gains(senders)
        full, scaled, bands, ends = tick_pass.heard_refreshed(
            ups, t, rx_cell[up], band[up], senders, stations, width, self._on_cell, co, gains,
            log.tx, log.sign, log.cell, *self._row_columns(_REFRESHED))  # fmt: skip
        self._board = StationBoard(k, self._gains, 0, len(senders), bands, ends, full, scaled)
        if len(downs):
            a["heard"][downs] = self._radios_heard(downs, rx_cell[~up], band[~up],
                                                   self._on_air(False))  # fmt: skip
            self._rerate(downs, t)
        self._queue.reset(rows, a["key"], a["stamp"])
        return True

    def _ticked(self, t: float) -> None:
        """The tick at ``t`` done (moves, handovers, resumes): each uplink row that could
        end before the next tick keyed at its interference floor until then
        (:func:`~mecsim.channels.tick_pass.floored`; see docs/design.md)."""
        rows = self.slots.index()
        ups = rows[self.slots.up[rows]]
        if not len(ups):
            return
        assert self.motion is not None
        a, until = self.slots.a, (self.motion.tick(t) + 1) * self.motion.tick_s
        senders = self._on_air(True)
        stations, gains = self._station_gains(senders)  # a table for today's stations, filled
        keyed = tick_pass.floored(ups, until, senders, stations, self._width(), self._on_cell,
                                  self._co_matrix(self._cell_bound()), gains, a["tx"],
                                  a["rx_cell"], *self._row_columns(_FLOORED))  # fmt: skip
        self._version += 1
        self._queue.push(keyed, a["key"], a["stamp"], self.slots.live)

    def _hand_overs(self, handovers: list) -> None:
        """A client with nothing open only changes cells: its handover touches no row (and
        touches nothing a busy client's reads, so the idle ones are served together)."""
        if not handovers:
            return
        clients = np.array([h.client for h in handovers])
        busy = set(clients[self.slots.open_of(clients) > 0].tolist())
        for h in handovers:
            if h.client in busy:
                self._hand_over(h.client, h.target, h.t)
        idle = [h for h in handovers if h.client not in busy]
        if idle:
            self._serve_all(np.array([h.client for h in idle]), np.array([h.target for h in idle]))
        self._version += 1

    def _hand_over(self, client: int, target: int, t: float) -> None:
        assert self.motion is not None and self.serving is not None
        a = self.slots.a
        mine = kernels.rows_where(self.slots.live, a["client"], client)
        if len(mine):  # they leave; their multicast mates are refreshed below
            self._evaluate(mine, self.now, refresh=False)
        self._serve(client, target)
        self._version += 1
        if not len(mine):
            return
        trs, ups = a["tr"][mine].tolist(), self.slots.up[mine].tolist()
        mates = np.setdiff1d(self._groups(mine), mine)
        self._suspend(self.slots.remove(mine), trs, ups, t)
        mates = mates[self.slots.alive[mates]]
        if len(mates):
            self._refresh(mates, self.now)

    def clone(self) -> EventMedium:
        twin = super().clone()
        assert isinstance(twin, EventMedium)
        twin.logs = {up: log.copy() for up, log in self.logs.items()}
        twin._next, twin._queue = None, self._queue.copy()
        twin._spent_at, twin._on_cell = self._spent_at.copy(), self._on_cell.copy()
        twin._air = {up: on.copy() for up, on in self._air.items()}
        twin._air_count = dict(self._air_count)
        twin._air_list = dict(self._air_list)  # its arrays are replaced, never written
        return twin
