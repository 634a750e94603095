"""Several transmitters on one shared medium: inter-cell interference as it happens.

Each transmitter (a cell's downlink radio, a client's uplink) is a
:class:`~mecsim.channels.sharing.SharedTransmitter` at a site. While a
transmitter has a transmission on the air it radiates its full power P_U over
its band B_U. A reception on transmitter T hears every other active
transmitter U of the same direction in a co-channel cell (see
:func:`mecsim.geometry.co_channel`) as interference

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

With moving clients (a :class:`Motion`), every tick (``motion.tick_s``) is a
change point too: clients' positions, hence every open reception's path gain
and the interference geometry, are those of the tick's start. A handover
(:class:`~mecsim.handover.HandoverSchedule`) detaches the client's open
receptions at its time; after the interruption each goes on as a new
transmission, a downlink one from the new cell's radio (in :attr:`Medium.resent`
for the caller to account for), an uplink one from the client's own
transmitter to the new cell's base station, with the bits already delivered
kept (``resume``) or not (``restart``). The reception keeps its start, so its
row spans the break.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from mecsim.channels.sharing import (  # noqa: I001
    PermanentOutage,
    Reception,
    SharedTransmitter,
    Transmission,
    step_length,
)


class Schedule(Protocol):
    """Handovers over time (:class:`mecsim.handover.HandoverSchedule`)."""

    interruption_s: float

    def next_after(self, start: float, end: float) -> float: ...
    def between(self, start: float, end: float) -> list: ...
    def cell_of(self, client: int, t: float) -> int: ...


@dataclass(frozen=True, slots=True)
class Site:
    """Where a transmitter is and what it interferes with."""

    x_m: float
    y_m: float
    cell: int
    direction: str
    """``"down"`` (a cell's radio) or ``"up"`` (a client's)."""
    client: int = -1
    """The client whose uplink this is (-1: a cell's radio); with :class:`Motion`, its
    position and cell are the client's current ones."""


@dataclass
class Motion:
    """Moving clients: positions every tick, their serving cells and handovers."""

    positions: Callable[[float], tuple[np.ndarray, np.ndarray]]
    """``positions(t) -> (x, y)`` of every client, m."""
    schedule: Schedule
    cells: list[tuple[float, float]]
    """Each cell's base station position (its receiver of uplinks)."""
    tick_s: float
    restart: bool = False
    """A transfer broken by a handover starts over (else it resumes)."""

    def tick(self, t: float) -> int:
        """The tick ``t`` falls in: ``k tick_s <= t < (k + 1) tick_s``."""
        k = math.floor(t / self.tick_s)
        return k + 1 if (k + 1) * self.tick_s <= t else k


Receiver = Callable[[Site, Reception], tuple[float, float]]
"""``receiver(site, reception) -> (x, y)``: where a reception on the transmitter at
``site`` is decoded."""


class Medium:
    """Transmitters at sites, stepped together with the interference they cause."""

    def __init__(
        self,
        gain: Callable[[np.ndarray], np.ndarray],
        co_channel: Callable[[int, int], bool],
        receiver: Receiver,
        motion: Motion | None = None,
    ) -> None:
        self.gain = gain
        """Path gain over distances in m (a numpy array in, an array out)."""
        self.co_channel = co_channel
        self.receiver = receiver
        self.motion = motion
        self.now = 0.0
        self.transmitters: list[SharedTransmitter] = []
        self.sites: dict[int, Site] = {}
        self.twins: dict[int, Reception | Transmission] = {}
        self.uplink_of: dict[int, SharedTransmitter] = {}
        self.radio_of: dict[int, SharedTransmitter] = {}
        self.suspended: list[tuple[float, Reception, Transmission, bool]] = []
        """Receptions in a handover's break: (resume at, reception, transmission it left,
        whether it is an uplink)."""
        self.resent: list[tuple[Transmission, Transmission]] = []
        """Downlink transmissions a handover started at the new cell, with the one each
        continues, for the caller to account for (it empties the list)."""
        self._tick = -1
        self._moved_until = 0.0
        self.client_x = self.client_y = np.zeros(0)
        """Every client's position in the current tick (with motion)."""

    def add(self, transmitter: SharedTransmitter, site: Site) -> SharedTransmitter:
        """Put ``transmitter`` on the medium at ``site``."""
        transmitter.now = self.now
        self.transmitters.append(transmitter)
        self.sites[id(transmitter)] = site
        if site.client >= 0:
            self.uplink_of[site.client] = transmitter
        else:
            self.radio_of[site.cell] = transmitter
        return transmitter

    @property
    def active(self) -> list[Transmission]:
        return [t for tx in self.transmitters for t in tx.active]

    def start(self, transmission: Transmission) -> None:
        """Start ``transmission`` now on its transmitter (``transmission.via``)."""
        transmitter = transmission.via
        assert transmitter is not None and id(transmitter) in self.sites, "an unknown transmitter"
        self._move(self.now)
        transmitter.now = self.now
        transmitter.start(transmission)
        self.aim(transmitter, transmission.receptions)

    # --- where things are ----------------------------------------------------------------
    def site(self, transmitter: SharedTransmitter) -> Site:
        """``transmitter``'s site now (a moving client's uplink: its position and cell)."""
        site = self.sites[id(transmitter)]
        if self.motion is None or site.client < 0:
            return site
        c = site.client
        cell = self.motion.schedule.cell_of(c, self.now)
        return replace(site, x_m=float(self.client_x[c]), y_m=float(self.client_y[c]), cell=cell)

    def aim(self, transmitter: SharedTransmitter, receptions: list[Reception]) -> None:
        """With motion: each reception's path gain over its current distance."""
        if self.motion is None:
            return
        site = self.site(transmitter)
        for r in receptions:
            x, y = self.receiver(site, r)
            d = max(math.hypot(site.x_m - x, site.y_m - y), 1e-9)
            r.rate = replace(r.rate, path_gain=float(self.gain(np.array(d))))  # type: ignore[type-var]

    def _move(self, t: float) -> None:
        """With motion, bring positions, handovers and breaks up to ``t``."""
        motion = self.motion
        if motion is None:
            return
        k = motion.tick(t)
        if k != self._tick:
            self._tick = k
            self.client_x, self.client_y = motion.positions(k * motion.tick_s)
            for tx in self.transmitters:
                for transmission in tx.active:
                    self.aim(tx, [r for r in transmission.receptions if r.open])
        for h in motion.schedule.between(self._moved_until, t):
            self._hand_over(h.client, h.t)
        self._moved_until = max(self._moved_until, t)
        due = [s for s in self.suspended if s[0] <= t]
        if due:
            self.suspended = [s for s in self.suspended if s[0] > t]
            for _, r, left, up in due:
                self._resume(r, left, up)

    def _hand_over(self, client: int, t: float) -> None:
        """Detach ``client``'s open receptions at ``t``; they resume after the break."""
        assert self.motion is not None
        resume_at = t + self.motion.schedule.interruption_s
        for tx in self.transmitters:
            up = self.sites[id(tx)].direction == "up"
            for transmission in list(tx.active):
                for r in [r for r in transmission.receptions if r.open and r.client == client]:
                    transmission.receptions.remove(r)
                    if self.motion.restart:
                        r.remaining = float(r.bits)
                    self.suspended.append((resume_at, r, transmission, up))
                if not transmission.open:
                    transmission.end = t
                    tx.active.remove(transmission)

    def _resume(self, r: Reception, left: Transmission, up: bool) -> None:
        """``r`` goes on from its client's new cell (see the module docstring)."""
        assert self.motion is not None
        cell = self.motion.schedule.cell_of(r.client, self.now)
        via = self.uplink_of[r.client] if up else self.radio_of[cell]
        again = Transmission([r], left.worst, via=via, tag=left.tag)
        via.now = self.now
        via.resume(again)
        self.aim(via, [r])
        if not up:
            self.resent.append((again, left))

    def _next_motion(self, t: float, horizon: float) -> float:
        """The next tick, break's end or handover after ``t`` (at most ``horizon``)."""
        motion = self.motion
        if motion is None:
            return horizon
        horizon = min(horizon, (motion.tick(t) + 1) * motion.tick_s)
        horizon = min([horizon, *(s[0] for s in self.suspended)])
        return min(horizon, motion.schedule.next_after(t, horizon))

    def _heard_by(self, busy: list[SharedTransmitter]) -> dict[int, float]:
        """The interference every open reception on ``busy`` hears now, by ``id``: one
        [reception x transmitter] array of ``P h(d) min(1, b / B)`` over the co-channel
        transmitters of other cells in the same direction."""
        receivers, own = [], []
        sites = [self.site(tx) for tx in busy]
        for k, (tx, site) in enumerate(zip(busy, sites, strict=True)):
            band = tx.bandwidth_hz / len(tx.active)
            for transmission in tx.active:
                for r in transmission.receptions:
                    if r.open:
                        receivers.append((id(r), *self.receiver(site, r), band, site))
                        own.append(k)
        if not receivers:
            return {}
        cells = sorted({s.cell for s in sites})
        index = {c: i for i, c in enumerate(cells)}
        co = np.array([[self.co_channel(a, b) for b in cells] for a in cells], dtype=bool)
        x = np.array([s.x_m for s in sites])
        y = np.array([s.y_m for s in sites])
        power = np.array([tx.power_w for tx in busy])
        width = np.array([tx.bandwidth_hz for tx in busy])
        cell = np.array([index[s.cell] for s in sites])
        up = np.array([s.direction == "up" for s in sites])
        rx = np.array([r[1] for r in receivers])
        ry = np.array([r[2] for r in receivers])
        band = np.array([r[3] for r in receivers])
        hears = (up[own][:, None] == up[None, :]) & co[cell[own]][:, cell]
        hears[np.arange(len(own)), own] = False  # not its own transmitter
        distance = np.hypot(x[None, :] - rx[:, None], y[None, :] - ry[:, None])
        gain = np.where(hears, self.gain(np.where(hears, distance, 1.0)), 0.0)
        share = np.minimum(1.0, band[:, None] / width[None, :])
        heard = (gain * power[None, :] * share).sum(axis=1)
        return dict(zip((r[0] for r in receivers), heard.tolist(), strict=True))

    def advance(self, until: float) -> list[Reception]:
        """Move every transmitter to ``until`` together; return the receptions that ended."""
        ended: list[Reception] = []
        while True:
            t = self.now
            self._move(t)
            busy = [tx for tx in self.transmitters if tx.active]
            if not busy:
                wake = min((s[0] for s in self.suspended), default=math.inf)
                if math.isinf(wake) or wake > until:
                    break
                self.now = wake
                continue
            if t >= until:
                break
            heard = self._heard_by(busy)  # changes only when a transmitter starts or stops
            plans = [(tx, tx.plan(until, lambda r, h=heard: h[id(r)])) for tx in busy]
            horizon = self._next_motion(t, min(h for _, (_, h) in plans))
            if math.isinf(horizon):
                stuck = [
                    r.client for _, (groups, _) in plans for _, rows in groups for r, *_ in rows
                ]
                raise PermanentOutage(stuck)
            step = step_length(t, horizon)
            for tx, (groups, _) in plans:
                ended += tx.apply(groups, t, step)
            self.now = t + step
        if not math.isinf(until):
            self.now = max(self.now, until)
        for tx in self.transmitters:
            tx.now = self.now if not math.isinf(until) else max(tx.now, self.now)
        return ended

    def next_change(self) -> float:
        """When the state next changes if nothing starts: a reception ending, a block
        boundary, a deadline, a tick, a handover or a break's end (inf if nothing will)."""
        self._move(self.now)
        busy = [tx for tx in self.transmitters if tx.active]
        wake = min((s[0] for s in self.suspended), default=math.inf)
        if not busy:
            return wake
        heard = self._heard_by(busy)
        horizon = min(tx.plan(math.inf, lambda r, h=heard: h[id(r)])[1] for tx in busy)
        return self._next_motion(self.now, min(horizon, wake))

    def clone(self) -> Medium:
        """A copy whose transmissions can advance without touching these (``twins`` maps
        ``id`` of each transmission and reception here to its copy)."""
        twin = copy.copy(self)
        twin.transmitters, twin.sites, twin.twins = [], {}, {}
        twin.uplink_of, twin.radio_of = {}, {}
        for tx in self.transmitters:
            copied = tx.clone()
            for t in copied.active:
                t.via = copied
            twin.add(copied, self.sites[id(tx)])
            copied.now = tx.now
            twin.twins.update(copied.twins)
        twin.suspended = []
        for at, r, left, up in self.suspended:
            r_twin = copy.copy(r)
            twin.twins[id(r)] = r_twin
            twin.suspended.append((at, r_twin, left, up))
        twin.resent = []
        return twin
