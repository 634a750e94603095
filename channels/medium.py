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
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

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
    ) -> None:
        self.gain = gain
        """Path gain over distances in m (a numpy array in, an array out)."""
        self.co_channel = co_channel
        self.receiver = receiver
        self.now = 0.0
        self.transmitters: list[SharedTransmitter] = []
        self.sites: dict[int, Site] = {}
        self.twins: dict[int, Reception | Transmission] = {}

    def add(self, transmitter: SharedTransmitter, site: Site) -> SharedTransmitter:
        """Put ``transmitter`` on the medium at ``site``."""
        transmitter.now = self.now
        self.transmitters.append(transmitter)
        self.sites[id(transmitter)] = site
        return transmitter

    @property
    def active(self) -> list[Transmission]:
        return [t for tx in self.transmitters for t in tx.active]

    def start(self, transmission: Transmission) -> None:
        """Start ``transmission`` now on its transmitter (``transmission.via``)."""
        transmitter = transmission.via
        assert transmitter is not None and id(transmitter) in self.sites, "an unknown transmitter"
        transmitter.now = self.now
        transmitter.start(transmission)

    def _heard_by(self, busy: list[SharedTransmitter]) -> dict[int, float]:
        """The interference every open reception on ``busy`` hears now, by ``id``: one
        [reception x transmitter] array of ``P h(d) min(1, b / B)`` over the co-channel
        transmitters of other cells in the same direction."""
        receivers, own = [], []
        for k, tx in enumerate(busy):
            site = self.sites[id(tx)]
            band = tx.bandwidth_hz / len(tx.active)
            for transmission in tx.active:
                for r in transmission.receptions:
                    if r.open:
                        receivers.append((id(r), *self.receiver(site, r), band, site))
                        own.append(k)
        if not receivers:
            return {}
        sites = [self.sites[id(tx)] for tx in busy]
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
        while self.now < until:
            busy = [tx for tx in self.transmitters if tx.active]
            if not busy:
                break
            t = self.now
            heard = self._heard_by(busy)  # changes only when a transmitter starts or stops
            plans = [(tx, tx.plan(until, lambda r, h=heard: h[id(r)])) for tx in busy]
            horizon = min(h for _, (_, h) in plans)
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

    def clone(self) -> Medium:
        """A copy whose transmissions can advance without touching these (``twins`` maps
        ``id`` of each transmission and reception here to its copy)."""
        twin = copy.copy(self)
        twin.transmitters, twin.sites, twin.twins = [], {}, {}
        for tx in self.transmitters:
            copied = tx.clone()
            for t in copied.active:
                t.via = copied
            twin.transmitters.append(copied)
            twin.sites[id(copied)] = self.sites[id(tx)]
            twin.twins.update(copied.twins)
        return twin
