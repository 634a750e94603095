"""Several transmitters on one shared medium: inter-cell interference as it happens.

Each transmitter (a cell's downlink radio, a client's uplink) is a
:class:`~mecsim.channels.sharing.SharedTransmitter` at a site. While a
transmitter has a transmission on the air it radiates its full power P_U over
its band B_U. A reception on transmitter T hears every other active
transmitter U of the same direction in a co-channel cell (see
:func:`mecsim.net.geometry.co_channel`) as interference

    I = sum_U P_U h(|s_U - q|) min(1, b / B_U)

at its receiver's position q (the client for a downlink, the serving cell's
base station for an uplink), b being the band it holds: U's power spread
evenly over U's band, of which the receiver's band catches at most all. Same
cell transmissions are orthogonal (FDMA) and do not interfere.

The interference changes only when a transmitter starts or stops, which
are change points of the fluid model already, so :meth:`Medium.advance`
steps every transmitter together from one change point to the next, each
step at the rates of the interference it holds (the piecewise integration
of :meth:`SharedTransmitter.advance`, coupled).

With moving clients (a :class:`~mecsim.channels.motion.Motion`), every tick
(``motion.tick_s``) is a change point too: clients' positions, hence every open
reception's path gain and the interference geometry, are those of the tick's start. A handover
(:class:`~mecsim.net.handover.HandoverSchedule`) detaches the client's open
receptions at its time; after the interruption each goes on as a new
transmission, a downlink one from the new cell's radio (in :attr:`Medium.resent`
for the caller to account for), an uplink one from the client's own
transmitter to the new cell's base station, with the bits already delivered
kept (``resume``) or not (``restart``). The reception keeps its start, so its
row spans the break.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mecsim.channels import fluid
from mecsim.channels.interference import Interference
from mecsim.channels.motion import Motion
from mecsim.channels.sharing import (
    PermanentOutage,
    Reception,
    SharedTransmitter,
    Transmission,
    step_length,
)


@dataclass(frozen=True, slots=True)
class Site:
    """Where a transmitter is and what it interferes with."""

    x_m: float
    y_m: float
    cell: int
    direction: str
    """``"down"`` (a cell's radio) or ``"up"`` (a client's)."""
    client: int = -1
    """The client whose uplink this is (-1: a cell's radio); with
    :class:`~mecsim.channels.motion.Motion`, its position and cell are the client's current
    ones."""


Receiver = Callable[[Site, Reception], tuple[float, float]]
"""``receiver(site, reception) -> (x, y)``: where a reception on the transmitter at
``site`` is decoded."""


class Medium(Interference):
    """Transmitters at sites, stepped together with the interference they cause.

    The open receptions live in arrays (:class:`~mecsim.channels.fluid.Slots`), so a
    step costs a few numpy operations whatever the number of transmitters; the
    :class:`Transmission` and :class:`Reception` objects are handles, updated when
    they end (:meth:`write_back` brings open ones up to date).
    """

    def __init__(
        self,
        gain: Callable[[np.ndarray], np.ndarray],
        co_channel: Callable[[int, int], bool],
        receiver: Receiver,
        motion: Motion | None = None,
        gain_of_squared: Callable[[np.ndarray], np.ndarray] | None = None,
        gain_form: tuple[float, float, int] | None = None,
    ) -> None:
        self.gain = gain
        """Path gain over distances in m (a numpy array in, an array out)."""
        self.gain_of_squared = gain_of_squared or (lambda squared: gain(np.sqrt(squared)))
        """The same over squared distances (a faster form may be given)."""
        self.gain_form = gain_form
        """``gain_of_squared``'s products for compiled loops (``squared_form``), or None."""
        self.co_channel, self.receiver, self.motion = co_channel, receiver, motion
        self.now = 0.0
        self.transmitters: list[SharedTransmitter] = []
        self.sites: dict[int, Site] = {}
        self._index: dict[int, int] = {}  # id(transmitter) -> its index
        self.uplink_of: dict[int, SharedTransmitter] = {}
        self.radio_of: dict[int, SharedTransmitter] = {}
        self.twins: dict[int, Reception | Transmission] = {}
        self.slots = fluid.Slots()
        self.transmissions: dict[int, Transmission] = {}
        """Open transmissions by slot number."""
        self._tr_tx: dict[int, int] = {}
        self._tr_open: dict[int, int] = {}
        self._tr_last: dict[int, float] = {}
        self._tr_energy: dict[int, float] = {}
        self._next_tr = 0
        self.active_count = np.zeros(0, dtype=np.int64)
        """Open transmissions per transmitter."""
        self._energy = np.zeros(0)
        """Per transmitter, the integral of its power per open transmission, ``P / n``: a
        transmission's energy is its growth while the transmission is open."""
        self.suspended: list[tuple[float, Reception, Transmission, bool]] = []
        """Receptions in a handover's break: (resume at, reception, transmission it left,
        whether it is an uplink)."""
        self.closed: list[Transmission] = []
        """Transmissions that ended, for the caller to hear of (it empties the list)."""
        self.resent: list[tuple[Transmission, Transmission]] = []
        """Downlink transmissions a handover started at the new cell, with the one each
        continues, for the caller to account for (it empties the list)."""
        self._moving(motion)
        # caches: the plan of this instant, transmitters' sites, gain tables, co-channel pairs
        self._plan: tuple | None = None
        self._co: np.ndarray | None = None
        self._static: tuple[np.ndarray, ...] | None = None
        self._gains = self._table = self._bound = self._uplink_index = None  # (Interference)
        self._tx_cells: np.ndarray | None = None
        self._one_band: tuple[float | None] | None = None
        self._band_order: tuple[np.ndarray, np.ndarray] | None = None

    def _moving(self, motion: Motion | None) -> None:
        """The state of moving clients: where they are, who serves them, handovers done."""
        self._tick = -1
        self._moved_until = 0.0
        self._moved_at: float | None = None  # when _move last ran: again at it does nothing
        self.client_x = self.client_y = np.zeros(0)
        """Clients' positions in the current tick (with motion), each filled the first time
        the tick asks for it (:meth:`position`): a tick costs the clients on the air."""
        self._placed = np.zeros(0, dtype=np.int64)
        """The tick each client's entry of ``client_x`` / ``client_y`` is for."""
        self.serving = None if motion is None else np.asarray(motion.initial).copy()
        """Every client's serving cell now (with motion)."""
        self._stations: dict[int, tuple[float, float]] = (
            {} if motion is None else dict(enumerate(motion.cells))
        )
        """Each base station's position (the receiver of its cell's uplinks)."""
        self._ended_in_move: list[Reception] = []

    # --- transmitters and transmissions ----------------------------------------------------
    def add(self, transmitter: SharedTransmitter, site: Site) -> SharedTransmitter:
        """Put ``transmitter`` on the medium at ``site``."""
        return self.add_all([(transmitter, site)])[0]

    def add_all(self, placed: list[tuple[SharedTransmitter, Site]]) -> list[SharedTransmitter]:
        """Put each transmitter on the medium at its site, the arrays grown once."""
        for transmitter, site in placed:
            self._index[id(transmitter)] = len(self.transmitters)
            self.transmitters.append(transmitter)
            self.sites[id(transmitter)] = site
            if site.client >= 0:
                self.uplink_of[site.client] = transmitter
            else:
                self.radio_of[site.cell] = transmitter
        self.active_count = np.concatenate([self.active_count, np.zeros(len(placed), np.int64)])
        self._energy = np.concatenate([self._energy, np.zeros(len(placed))])
        self._static = self._one_band = self._band_order = None
        return [transmitter for transmitter, _ in placed]

    @property
    def active(self) -> list[Transmission]:
        return list(self.transmissions.values())

    def busy(self, transmitter: SharedTransmitter) -> bool:
        """Whether ``transmitter`` has a transmission on the air."""
        return bool(self.active_count[self._index[id(transmitter)]])

    def start(self, transmission: Transmission) -> None:
        """Start ``transmission`` now on its transmitter (``transmission.via``)."""
        self._move(self.now)
        if transmission.begin(self.now):
            self._register(transmission)
        else:
            self.closed.append(transmission)

    def join(self, transmission: Transmission, receptions: list[Reception]) -> None:
        """Add ``receptions`` to ``transmission``, which started at this instant."""
        for r in receptions:
            r.start = self.now
            if r.bits <= 0:
                r.end = self.now
        transmission.receptions += receptions
        tr = next(k for k, t in self.transmissions.items() if t is transmission)
        self._add_slots(tr, transmission, [r for r in receptions if r.open])

    def _register(self, transmission: Transmission) -> None:
        via = transmission.via
        assert via is not None and id(via) in self._index, "an unknown transmitter"
        x = self._index[id(via)]
        tr, self._next_tr = self._next_tr, self._next_tr + 1
        self.transmissions[tr] = transmission
        self._tr_tx[tr] = x
        self._tr_open[tr], self._tr_last[tr] = 0, -math.inf
        self._count(x, +1)
        self._tr_energy[tr] = self._energy_now(x)
        self._add_slots(tr, transmission, [r for r in transmission.receptions if r.open])

    def _add_slots(self, tr: int, transmission: Transmission, receptions: list[Reception]) -> None:
        via = transmission.via
        assert via is not None
        site = self.site(via)
        rx = [self.receiver(site, r) for r in receptions]
        if site.direction == "up" and receptions and site.cell not in self._stations:
            self._stations[site.cell] = rx[0]
        self._tr_open[tr] += len(receptions)
        self.slots.add(receptions, self._tr_tx[tr], tr, site.direction == "up",
                       transmission.worst, rx, self.now)  # fmt: skip
        if self.motion is not None:
            self._aim(np.arange(len(self.slots) - len(receptions), len(self.slots)))
        self._plan = None

    def _end_transmission(self, tr: int, end: float) -> None:
        transmission = self.transmissions.pop(tr)
        transmission.end = end
        self.closed.append(transmission)
        x = self._tr_tx.pop(tr)
        transmission.energy_j += self._energy_now(x) - self._tr_energy.pop(tr)
        del self._tr_open[tr], self._tr_last[tr]
        self._count(x, -1)

    def _count(self, x: int, change: int) -> None:
        """Transmitter ``x`` gains or loses a transmission now."""
        self.active_count[x] += change

    def _energy_now(self, x: int) -> float:
        """Transmitter ``x``'s energy per open transmission, up to now."""
        return float(self._energy[x])

    def write_back(self) -> None:
        """Bring the open receptions' and transmissions' objects up to date."""
        self.slots.write_back()
        for tr, transmission in self.transmissions.items():
            now = float(self._energy[self._tr_tx[tr]])
            transmission.energy_j += now - self._tr_energy[tr]
            self._tr_energy[tr] = now

    # --- where things are ------------------------------------------------------------------
    def site(self, transmitter: SharedTransmitter) -> Site:
        """``transmitter``'s site now (a moving client's uplink: its position and cell)."""
        site = self.sites[id(transmitter)]
        if self.motion is None or site.client < 0:
            return site
        c = site.client
        assert self.serving is not None
        return Site(*self.position(c), int(self.serving[c]), site.direction, c)

    def _aim(self, index: np.ndarray) -> None:
        """With motion: receivers and path gains of slots ``index`` from where things are."""
        assert self.motion is not None and self.serving is not None
        a, up = self.slots.a, self.slots.up[index]
        client, tx = a["client"][index], a["tx"][index]
        stations = np.asarray(self.motion.cells)
        serving = self.serving[client]
        cx, cy = self._client_xy(client)
        radio_x, radio_y = self._sites()[:2]
        # the end that does not move: the serving base station of an uplink, the radio of a
        # downlink
        fixed_x = np.where(up, stations[serving, 0], radio_x[tx])
        fixed_y = np.where(up, stations[serving, 1], radio_y[tx])
        a["rx"][index] = np.where(up, fixed_x, cx)
        a["ry"][index] = np.where(up, fixed_y, cy)
        d = np.maximum(np.hypot(fixed_x - cx, fixed_y - cy), 1e-9)
        a["path_gain"][index] = self.gain(d)

    def _move(self, t: float) -> None:
        """With motion, bring positions, handovers and breaks up to ``t``, once per ``t`` (only
        a move makes handovers, and it resumes the breaks they start that end by ``t``)."""
        motion = self.motion
        if motion is None or t == self._moved_at:
            return
        k = motion.tick(t)
        ticked = k != self._tick
        if ticked:
            self._new_tick(k, t)
        self._hand_overs(motion.schedule.between(self._moved_until, t))
        self._moved_until = max(self._moved_until, t)
        due = [s for s in self.suspended if s[0] <= t]
        if due:
            self.suspended = [s for s in self.suspended if s[0] > t]
            for _, r, left, up in due:
                self._resume(r, left, up)
        if ticked:
            self._ticked(t)
        self._moved_at = t

    def _new_tick(self, k: int, t: float) -> None:
        """Tick ``k`` starts at ``t``: clients' positions, and the path gains from them."""
        assert self.motion is not None
        self._tick = k  # clients' positions: filled as asked for (_client_xy)
        self._aim(np.arange(len(self.slots)))
        self._plan = None

    def _ticked(self, t: float) -> None:
        """After the tick at ``t`` and the handovers and resumes at it (a hook)."""

    def _hand_overs(self, handovers: list) -> None:
        """The ``handovers`` (in time order), one by one."""
        for h in handovers:
            self._hand_over(h.client, h.target, h.t)

    def _hand_over(self, client: int, target: int, t: float) -> None:
        """Detach ``client``'s open receptions at ``t``; they resume after the break."""
        assert self.motion is not None and self.serving is not None
        self._serve(client, target)
        mine = self.slots.a["client"] == client
        if not mine.any():
            return
        trs, ups = self.slots.a["tr"][mine].tolist(), self.slots.up[mine].tolist()
        self._suspend(self.slots.remove(mine), trs, ups, t)
        self._plan = None

    def _suspend(self, gone: list[Reception], trs: list[int], ups: list[bool], t: float) -> None:
        """Receptions ``gone`` (of transmissions ``trs``), detached by a handover at ``t``,
        wait out the break; a transmission left with none ends."""
        assert self.motion is not None
        resume_at = t + self.motion.schedule.interruption_s
        for r, tr, up in zip(gone, trs, ups, strict=True):
            transmission = self.transmissions[tr]
            transmission.receptions.remove(r)
            if self.motion.restart:
                r.remaining = float(r.bits)
            self.suspended.append((resume_at, r, transmission, up))
            self._tr_open[tr] -= 1
            if self._tr_open[tr] == 0:
                self._end_transmission(tr, max(t, self._tr_last[tr]))

    def _resume(self, r: Reception, left: Transmission, up: bool) -> None:
        """``r`` goes on from its client's new cell (see the module docstring)."""
        assert self.serving is not None
        via = self.uplink_of[r.client] if up else self.radio_of[int(self.serving[r.client])]
        again = Transmission([r], left.worst, start=self.now, via=via, tag=left.tag)
        if self.now >= r.deadline:  # its deadline passed in the break
            r.end, r.failed = self.now, True
            self._ended_in_move.append(r)
            return
        self._register(again)
        if not up:
            self.resent.append((again, left))

    def _next_motion(self, t: float, horizon: float) -> float:
        """The next tick, break's end or handover after ``t`` (at most ``horizon``)."""
        motion = self.motion
        if motion is None:
            return horizon
        horizon = min(horizon, (motion.tick(t) + 1) * motion.tick_s)
        if self.suspended:
            horizon = min(horizon, min(s[0] for s in self.suspended))
        return min(horizon, motion.schedule.next_after(t, horizon))

    # --- rates ------------------------------------------------------------------------
    def _rates(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(rate, SINR) of every open reception now and the next change point (cached
        until the state changes)."""
        key = self.now
        if self._plan is not None and self._plan[0] == key:
            return self._plan[1]
        count = self.active_count[self.slots.a["tx"]]
        width, power = self._width(), self._power()
        share_b = width[self.slots.a["tx"]] / count
        share_p = power[self.slots.a["tx"]] / count
        groups = fluid.Groups(self.slots.a["tr"])
        rate, sinr = fluid.rates(self.slots, share_b, share_p, self._heard(share_b), groups)
        horizon = fluid.horizon(self.slots, self.now, rate, math.inf)
        self._plan = (key, (rate, sinr, horizon))
        return rate, sinr, horizon

    # --- stepping --------------------------------------------------------------------------
    def advance(self, until: float) -> list[Reception]:
        """Move every transmitter to ``until`` together; return the receptions that ended.
        (:meth:`_horizon` finds each change point, :meth:`_step` steps to it.)"""
        ended: list[Reception] = []
        while True:
            t = self.now
            self._move(t)
            ended += self._ended_in_move
            self._ended_in_move = []
            if not len(self.slots):
                wake = min((s[0] for s in self.suspended), default=math.inf)
                if math.isinf(wake) or wake > until:
                    break
                self.now = wake
                continue
            if t >= until:
                break
            horizon = self._horizon(t, until)
            if math.isinf(horizon):
                raise PermanentOutage(self._open_clients())
            ended += self._step(t, step_length(t, horizon))
        if not math.isinf(until):
            self.now = max(self.now, until)
        return ended

    def _horizon(self, t: float, limit: float) -> float:
        """The next change point after ``t``, at most ``limit`` (the medium at ``t``)."""
        _, _, horizon = self._rates()
        return self._next_motion(t, min(horizon, limit))

    def _open_clients(self) -> list[int]:
        return self.slots.a["client"].tolist()

    def _step(self, t: float, step: float) -> list[Reception]:
        """One step of length ``step`` from ``t`` at the rates of ``t`` (see :mod:`.fluid`)."""
        rate, sinr, _ = self._rates()
        count = self.active_count
        on = count > 0
        self._energy[on] += self._power()[on] / count[on] * step
        trs = self.slots.a["tr"]
        done, failed, end = fluid.step(self.slots, t, step, rate, sinr)
        closing = trs[done].tolist()
        ends = end[done].tolist()
        gone = fluid.close(self.slots, done, failed, end)
        for tr, e in zip(closing, ends, strict=True):
            self._tr_open[tr] -= 1
            self._tr_last[tr] = max(self._tr_last[tr], e)
            if self._tr_open[tr] == 0:
                self._end_transmission(tr, self._tr_last[tr])
        self.now = t + step
        self._plan = None
        return gone

    def next_change(self) -> float:
        """When the state next changes if nothing starts: a reception ending, a block
        boundary, a deadline, a tick, a handover or a break's end (inf if nothing will)."""
        self._move(self.now)
        wake = min((s[0] for s in self.suspended), default=math.inf)
        if not len(self.slots):
            return wake
        return self._horizon(self.now, wake)

    def clone(self) -> Medium:
        """A copy whose transmissions can advance without touching these (``twins`` maps
        ``id`` of each transmission and reception here to its copy)."""
        import copy

        twin = copy.copy(self)
        twin.slots, twin.twins = self.slots.copy()
        twin.transmissions = {}
        for tr, t in self.transmissions.items():
            copied = copy.copy(t)
            copied.receptions = [twin.twins.get(id(r), r) for r in t.receptions]
            twin.transmissions[tr] = copied
            twin.twins[id(t)] = copied
        for name in ("_tr_tx", "_tr_open", "_tr_last", "_tr_energy"):
            setattr(twin, name, dict(getattr(self, name)))
        twin.active_count = self.active_count.copy()
        twin._energy = self._energy.copy()
        twin.suspended = []
        for at, r, left, up in self.suspended:
            r_twin = copy.copy(r)
            twin.twins[id(r)] = r_twin
            twin.suspended.append((at, r_twin, left, up))
        twin.serving = None if self.serving is None else self.serving.copy()
        twin._tx_cells = twin._gains = twin._table = None  # tables the twin's ticks would reuse
        twin.client_x, twin.client_y = self.client_x.copy(), self.client_y.copy()
        twin._placed = self._placed.copy()
        twin.resent, twin.closed, twin._ended_in_move, twin._plan = [], [], [], None
        twin._stations = dict(self._stations)
        return twin
