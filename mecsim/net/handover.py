"""Which cell serves each moving client, and when it hands over.

Every ``tick_s`` (the network's coherence time: positions update at least
once a fading block) each client measures every cell's mean received power
``P_c h(d_c)`` at its position then. A client hands over (3GPP's A3 event)
when another cell's power exceeds its serving cell's by
``network.handover_margin_db`` at every tick for ``handover_time_to_trigger_s``:
the handover happens at the first tick at which the condition has held that
long (with a time-to-trigger of 0, at the first tick it holds), to the
strongest cell then. For ``handover_interruption_s`` after it the client
sends and receives nothing and measures nothing (so it is measured next at the first
tick after the break).

The schedule depends only on the trajectories, so it is computed ahead of the
simulation as far as it is asked for, one tick at a time, and kept as a list of
:class:`Handover` records in time order. A tick measures only the clients that
could hand over at it: with path gain ``K d^-n`` and no client faster than ``v``,
a client whose every other cell ``c`` needs it to move ``x_c = (rho_c d_c - d_s) /
(1 + rho_c)`` (``rho_c = (margin P_s / P_c)^(1/n)``) before ``P_c K d_c^-n`` can
pass ``margin`` times its serving cell's power cannot meet the A3 condition for
``min_c x_c / (v tick)`` ticks, so it is measured next after them. The
condition is false at every skipped tick, so the schedule is the one every
client measured at every tick would give (``tests/net/test_handover.py``).
"""

from __future__ import annotations

import bisect
import functools
import math
from itertools import repeat
from types import ModuleType
from typing import NamedTuple

import numpy as np

from mecsim.channels import LogDistancePathLoss
from mecsim.channels.interference import compiled
from mecsim.net.geometry import Cell
from mecsim.net.mobility import Trajectories

MAX_QUIET_TICKS = 1 << 40
"""A client that cannot hand over (static, or one cell) is measured again after this many."""
WINDOW_TICKS = 16
"""Ticks between scans of every client for those due soon (:meth:`HandoverSchedule._due`)."""


@functools.cache
def _bound() -> ModuleType:
    """:mod:`mecsim.net.handover_bound` (numba), imported on first use: moving runs in
    several cells only."""
    from mecsim.net import handover_bound

    return handover_bound


class Handover(NamedTuple):
    """One handover: ``client`` leaves ``source`` for ``target`` at ``t`` (a named tuple:
    ~100,000 are made a round at 100,000 moving clients)."""

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
        self._form = pathloss.squared_form()
        self._stations_xy = np.array([[c.x_m, c.y_m] for c in cells], dtype=float).reshape(-1, 2)
        n = len(initial)
        self.serving = np.asarray(initial, dtype=np.int64).copy()
        self._initial = self.serving.copy()
        self._candidate = np.full(n, -1)
        self._since = np.zeros(n, dtype=np.int64)
        self._busy_until = np.full(n, -math.inf)  # interrupted: no measurements
        self._next_check = np.full(n, 0 if len(cells) > 1 else MAX_QUIET_TICKS, dtype=np.int64)
        """The next tick that measures each client (one cell: none, nowhere to hand over to)."""
        self._near = (0, np.arange(n), self._next_check.copy())
        """(window end, the clients due before it, their next checks side by side)."""
        speed = trajectories.max_speed_mps
        self._reach = None if speed is None or pathloss.exponent <= 0 else speed * tick_s
        """How far a client can move in one tick (m); None: measure every client every tick."""
        self._ratio = np.zeros((0, 0))
        if self._reach is not None:
            power = self._power
            self._ratio = (self.margin * power[:, None] / power[None, :]) ** (1 / pathloss.exponent)
            """``rho_c`` of the module's bound: [serving cell x cell]."""
        self.ticks = 0
        """Ticks evaluated: the schedule is known for times before ``ticks * tick_s``."""
        self.handovers: list[Handover] = []
        self._times: list[float] = []
        self._latest = np.full(n, -1, dtype=np.int64)
        """Each client's latest handover (its index in ``handovers``; -1: none)."""
        self._earlier: list[int] = []
        """For each handover, the index of the same client's one before (-1: none)."""

    def tick_time(self, k: int) -> float:
        return k * self.tick_s

    def _first_ticks_from(self, times: np.ndarray) -> np.ndarray:
        """For each of ``times``, the first tick ``k`` with ``tick_time(k) >= time``."""
        k = np.ceil(times / self.tick_s).astype(np.int64)
        k -= (k - 1) * self.tick_s >= times  # the quotient's rounding, either way
        k += k * self.tick_s < times
        return k

    def _due(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The clients measured at tick ``k``, in order, and their places in the window's
        list. Every ``WINDOW_TICKS`` ticks every client is scanned for those due before the
        window's end; a tick scans those only (a client's next check changes only when it
        is measured, so no other falls due), in a copy of their next checks kept side by
        side (a contiguous read; its own gain was within the noise of a round's timing)."""
        end, near, checks = self._near
        if k >= end:
            end = k + WINDOW_TICKS
            near = np.flatnonzero(self._next_check < end)
            checks = self._next_check[near]
            self._near = (end, near, checks)
        if not len(near):
            return near, near
        places = _bound().due(checks, k)
        return near[places], places

    def _evaluate(self, k: int) -> None:
        """Tick ``k``: the due clients measure every cell (compiled: one pass per client
        where the path loss is products, :func:`~mecsim.net.handover_bound.evaluate`;
        else numpy's gains, then :func:`~mecsim.net.handover_bound.measure`); each
        handover is recorded and each client's next measurement set by the module's
        bound."""
        t = self.tick_time(k)
        clients, places = self._due(k)
        if not len(clients):
            return
        x, y = self.trajectories.positions_of(t, clients)
        if self._form is not None:
            reach = -1.0 if self._reach is None else self._reach
            moved, source, target = _bound().evaluate(
                k, t, clients, places, x, y, self._stations_xy, self._power, self._form,
                self.serving, self._candidate, self._since, self._busy_until, self.margin,
                self.trigger_ticks, self.interruption_s, self._ratio, reach, MAX_QUIET_TICKS,
                self.tick_s, self._next_check, self._near[2],
            )  # fmt: skip
        else:
            moved, source, target = self._measure(k, t, clients, places, x, y)
        movers, first = clients[moved], len(self.handovers)
        self.handovers += map(Handover, repeat(t), movers.tolist(), source.tolist(),
                              target.tolist())  # fmt: skip
        self._times += [t] * len(movers)
        self._earlier += self._latest[movers].tolist()
        self._latest[movers] = np.arange(first, len(self.handovers))

    def _measure(
        self, k: int, t: float, clients: np.ndarray, places: np.ndarray, x: np.ndarray,
        y: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """Tick ``k`` for ``clients`` at (``x``, ``y``) in array passes (a path loss that
        is a power: numpy's); returns :func:`~mecsim.net.handover_bound.measure`'s."""
        squared = compiled().squared_distances(x, y, self._stations_xy)
        serving, watch = self.serving[clients], np.empty(len(clients), dtype=bool)
        gain = self.pathloss.gain_of_squared(squared)
        moved, source, target = _bound().measure(
            k, t, clients, np.multiply(gain, self._power[None, :], out=gain), self.serving,
            self._candidate, self._since, self._busy_until, self.margin, self.trigger_ticks,
            self.interruption_s, watch,
        )  # fmt: skip
        checks = k + 1 + self._quiet_ticks(squared, serving, watch)
        resting = np.flatnonzero(self._busy_until[clients] > t)
        if len(resting):  # in a break: measures nothing, so changes nothing, until it ends
            ends = self._first_ticks_from(self._busy_until[clients[resting]])
            checks[resting] = np.maximum(checks[resting], ends)
        self._next_check[clients] = checks
        self._near[2][places] = checks
        return moved, source, target

    def _quiet_ticks(
        self, squared: np.ndarray, serving: np.ndarray, watch: np.ndarray
    ) -> np.ndarray:
        """Ticks after this one at which no other cell can pass the margin over the serving
        one (the module's bound), 0 for ``watch`` clients or without a speed bound."""
        if self._reach is None:
            return np.zeros(len(serving), dtype=np.int64)
        return _bound().quiet_ticks(squared, serving, self._ratio, self._reach, watch,
                                    MAX_QUIET_TICKS)  # fmt: skip

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
        h = self._last_by(client, t)
        return int(self._initial[client]) if h is None else h.target

    def interrupted(self, client: int, t: float) -> bool:
        """Whether ``client`` is in a handover's break at ``t``."""
        h = self._last_by(client, t)
        return h is not None and t < h.t + self.interruption_s

    def _last_by(self, client: int, t: float) -> Handover | None:
        """``client``'s latest handover at or before ``t``, if any."""
        self.advance(t)
        i = int(self._latest[client])
        while i >= 0 and self.handovers[i].t > t:
            i = self._earlier[i]
        return self.handovers[i] if i >= 0 else None
