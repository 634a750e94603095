"""Which cell serves each moving client, and when it hands over.

Every ``tick_s`` (the network's coherence time: positions update at least
once a fading block) each client measures every cell's mean received power
``P_c h(d_c)`` at its position then. A client hands over (3GPP's A3 event)
when another cell's power exceeds its serving cell's by
``network.handover_margin_db`` at every tick for ``handover_time_to_trigger_s``:
the handover happens at the first tick at which the condition has held that
long (with a time-to-trigger of 0, at the first tick it holds), to the
strongest cell then. For ``handover_interruption_s`` after it the client
sends and receives nothing and measures nothing.

The schedule depends only on the trajectories, so it is computed ahead of the
simulation as far as it is asked for, one tick for all clients at a time, and
kept as a list of :class:`Handover` records in time order.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from mecsim.channels import LogDistancePathLoss
from mecsim.net.geometry import Cell
from mecsim.net.mobility import Trajectories


@dataclass(frozen=True, slots=True)
class Handover:
    """One handover: ``client`` leaves ``source`` for ``target`` at ``t``."""

    t: float
    client: int
    source: int
    target: int


class HandoverSchedule:
    """Every client's serving cell over time, computed tick by tick as far as asked."""

    def __init__(
        self,
        trajectories: Trajectories,
        cells: list[Cell],
        pathloss: LogDistancePathLoss,
        tick_s: float,
        margin_db: float,
        time_to_trigger_s: float,
        interruption_s: float,
        initial: np.ndarray,
    ) -> None:
        self.trajectories, self.cells, self.pathloss = trajectories, cells, pathloss
        self.tick_s, self.interruption_s = tick_s, interruption_s
        self.margin = 10 ** (margin_db / 10)
        self.trigger_ticks = math.ceil(time_to_trigger_s / tick_s - 1e-9)
        self._power = np.array([c.tx_power_w for c in cells])
        self._bx = np.array([c.x_m for c in cells])
        self._by = np.array([c.y_m for c in cells])
        n = len(initial)
        self.serving = np.asarray(initial, dtype=np.int64).copy()
        self._initial = self.serving.copy()
        self._candidate = np.full(n, -1)
        self._since = np.zeros(n, dtype=np.int64)
        self._busy_until = np.full(n, -math.inf)  # interrupted: no measurements
        self.ticks = 0
        """Ticks evaluated: the schedule is known for times before ``ticks * tick_s``."""
        self.handovers: list[Handover] = []
        self._times: list[float] = []
        self._by_client: dict[int, list[Handover]] = {}

    def tick_time(self, k: int) -> float:
        return k * self.tick_s

    def received_w(self, t: float) -> np.ndarray:
        """[client x cell] mean received power at time ``t``, W (per W of noise: path
        gain times the cell's power)."""
        x, y = self.trajectories.positions(t)
        squared = x[:, None] - self._bx[None, :]  # in place: [client x cell] arrays are big
        np.multiply(squared, squared, out=squared)
        dy = y[:, None] - self._by[None, :]
        np.multiply(dy, dy, out=dy)
        np.add(squared, dy, out=squared)
        np.maximum(squared, 1e-18, out=squared)
        gain = self.pathloss.gain_of_squared(squared)
        return np.multiply(gain, self._power[None, :], out=gain)

    def _evaluate(self, k: int) -> None:
        t = self.tick_time(k)
        power = self.received_w(t)
        rows = np.arange(len(self.serving))
        best = np.argmax(power, axis=1)
        stronger = (best != self.serving) & (
            power[rows, best] > self.margin * power[rows, self.serving]
        )
        stronger &= self._busy_until <= t
        new = stronger & (self._candidate != best)
        self._since = np.where(new, k, self._since)
        self._candidate = np.where(stronger, best, -1)
        due = stronger & (k - self._since >= self.trigger_ticks)
        for c in np.flatnonzero(due).tolist():
            h = Handover(t, c, int(self.serving[c]), int(best[c]))
            self.handovers.append(h)
            self._times.append(t)
            self._by_client.setdefault(c, []).append(h)
        self.serving = np.where(due, best, self.serving)
        self._busy_until = np.where(due, t + self.interruption_s, self._busy_until)
        self._candidate = np.where(due, -1, self._candidate)

    def advance(self, t: float) -> None:
        """Evaluate every tick at or before ``t``."""
        while self.tick_time(self.ticks) <= t:
            self._evaluate(self.ticks)
            self.ticks += 1

    def between(self, start: float, end: float) -> list[Handover]:
        """The handovers in ``(start, end]``, in time order (then client order)."""
        self.advance(end)
        lo = bisect.bisect_right(self._times, start)
        hi = bisect.bisect_right(self._times, end)
        return self.handovers[lo:hi]

    def next_after(self, start: float, end: float) -> float:
        """When the first handover after ``start`` happens, if by ``end`` (else inf); never
        looks past ``end`` (which may be inf only when a handover is sure to come)."""
        while True:
            lo = bisect.bisect_right(self._times, start)
            if lo < len(self._times):
                return self._times[lo] if self._times[lo] <= end else math.inf
            if self.tick_time(self.ticks) > end:
                return math.inf
            self._evaluate(self.ticks)
            self.ticks += 1

    def cell_of(self, client: int, t: float) -> int:
        """The cell serving ``client`` at ``t`` (the target of a handover at ``t``)."""
        self.advance(t)
        own = self._by_client.get(client, [])
        k = bisect.bisect_right([h.t for h in own], t)
        return own[k - 1].target if k else int(self._initial[client])

    def interrupted(self, client: int, t: float) -> bool:
        """Whether ``client`` is in a handover's break at ``t``."""
        self.advance(t)
        own = self._by_client.get(client, [])
        k = bisect.bisect_right([h.t for h in own], t)
        return bool(k) and t < own[k - 1].t + self.interruption_s
