"""Where moving clients are: seeded trajectories, every client's position at any time.

Each model answers :meth:`Trajectories.positions` for all clients at once
(numpy), for any time ``t >= 0`` and in any order: the same scenario and seed
give the same positions whoever asks first. Trajectories are drawn lazily, a
leg (random waypoint) or a step (Gauss-Markov) at a time for every client
together, from streams keyed by the leg or step index, so how far a run looks
ahead never changes them.

* ``static``: clients stay where they are placed.
* ``random_waypoint`` (Johnson and Maltz): each client walks in a straight line
  to a destination drawn uniformly in ``area_m`` at a speed drawn uniformly in
  ``speed_mps``, pauses ``pause_s``, and draws the next leg.
* ``gauss_markov`` (Camp, Boleng and Davies, 2002, section 2.8): every
  ``step_s`` a client's speed and direction are
  ``s_n = a s_{n-1} + (1 - a) s_mean + sqrt(1 - a^2) sigma_s w`` (likewise the
  direction, whose mean turns toward the centre near an edge), ``a`` being
  ``memory``; the speed is clipped to ``speed_mps`` and a step that would leave
  the area is mirrored back into it. Between steps a client moves in a straight
  line.
* ``trace``: a CSV of ``t, client, x, y`` rows, linearly interpolated in time;
  before its first row a client is at its first position, after its last at
  its last; clients absent from the trace stay where they are placed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mecsim.common.rng import numpy_rng

Area = tuple[float, float, float, float]
"""``(x_min, y_min, x_max, y_max)``, m."""


class Trajectories:
    """Every client's position over time (static: where it was placed)."""

    moving = False

    def __init__(self, x_m: np.ndarray, y_m: np.ndarray) -> None:
        self.x0 = np.asarray(x_m, dtype=float)
        self.y0 = np.asarray(y_m, dtype=float)

    @property
    def max_speed_mps(self) -> float | None:
        """No client moves faster than this (m/s; None: no bound is known)."""
        return 0.0

    def positions(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of every client at time ``t`` (s), m."""
        return self.x0, self.y0

    def positions_of(self, t: float, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of ``clients`` (indices) at time ``t``: :meth:`positions` of those rows."""
        x, y = self.positions(t)
        return x[clients], y[clients]


@dataclass(eq=False)
class _Cursor:
    """Each client's leg under way (or paused after) at ``t``: ``legs`` [n x 6], their
    ``index`` in the drawn legs."""

    t: float
    index: np.ndarray
    legs: np.ndarray


MAX_CURSORS = 4
"""Cursors kept: the handover schedule, which looks ahead, and the medium's ticks each
move forward in time from their own."""


class RandomWaypoint(Trajectories):
    """Random waypoint: straight legs to uniform destinations, uniform speeds, pauses."""

    moving = True

    def __init__(
        self,
        x_m: np.ndarray,
        y_m: np.ndarray,
        area: Area,
        speed_mps: tuple[float, float],
        pause_s: float,
        seed: int,
    ) -> None:
        super().__init__(x_m, y_m)
        self.area, self.speed, self.pause_s, self.seed = area, speed_mps, pause_s, seed
        n = len(self.x0)
        self._legs = np.empty((0, n, 6))
        """[leg x client x 6]: room for the legs drawn (doubled when full: a leg is drawn for
        every client whenever the first of them needs one, tens of times a run at 100,000
        clients); a client's leg is one cache line."""
        self._drawn = 0
        self._next_x, self._next_y, self._free_at = self.x0.copy(), self.y0.copy(), np.zeros(n)
        self._free_from = 0.0
        """The earliest of ``_free_at``: legs are drawn up to there."""
        self._rows = np.arange(n)
        self._cursors: list[_Cursor] = []

    @property
    def legs(self) -> np.ndarray:
        """[legs x 6 x clients]: depart, arrive, x_from, y_from, x_to, y_to of every client's
        legs drawn so far (a view)."""
        return self._legs[: self._drawn].transpose(0, 2, 1)

    def _draw_leg(self) -> None:
        j = self._drawn
        rng = numpy_rng(self.seed, "mobility", "leg", j)
        n = len(self.x0)
        x_min, y_min, x_max, y_max = self.area
        to_x = rng.uniform(x_min, x_max, n)
        to_y = rng.uniform(y_min, y_max, n)
        speed = rng.uniform(self.speed[0], self.speed[1], n)
        depart = self._free_at
        length = np.hypot(to_x - self._next_x, to_y - self._next_y)
        arrive = depart + length / speed
        if j == len(self._legs):
            room = np.empty((max(4, 2 * j), n, 6))
            room[:j] = self._legs
            self._legs = room
        for f, values in enumerate((depart, arrive, self._next_x, self._next_y, to_x, to_y)):
            self._legs[j, :, f] = values
        self._drawn = j + 1
        self._next_x, self._next_y, self._free_at = to_x, to_y, arrive + self.pause_s
        self._free_from = float(self._free_at.min())

    @property
    def max_speed_mps(self) -> float:
        return float(self.speed[1])

    def leg_at(self, t: float) -> np.ndarray:
        """[6 x n]: each client's leg under way (or paused after) at ``t`` (a cursor's
        clients moved on only by :meth:`positions_of` catch up here)."""
        cursor = self._drawn_cursor(t)
        ahead = np.flatnonzero(cursor.legs[:, 1] + self.pause_s <= t)  # next leg begun by t
        while len(ahead):
            cursor.index[ahead] += 1
            cursor.legs[ahead] = self._legs[cursor.index[ahead], ahead]
            ahead = ahead[cursor.legs[ahead, 1] + self.pause_s <= t]
        cursor.t = t
        return cursor.legs.T

    def _drawn_cursor(self, t: float) -> _Cursor:
        """:meth:`_cursor` at ``t``, with every client's legs drawn past ``t``."""
        while self._free_from <= t:
            self._draw_leg()
        return self._cursor(t)

    def _cursor(self, t: float) -> _Cursor:
        """The latest cursor at or before ``t`` (callers advancing in time each keep
        theirs), or a new one that counts the legs begun by ``t``."""
        cursor = None
        for c in self._cursors:  # the latest at or before t (the first of equals)
            if c.t <= t and (cursor is None or c.t > cursor.t):
                cursor = c
        if cursor is not None:
            self._cursors.remove(cursor)
        else:
            index = (self._legs[: self._drawn, :, 0] <= t).sum(axis=0) - 1
            cursor = _Cursor(t, index, self._legs[index, self._rows])
        self._cursors = [*self._cursors[-(MAX_CURSORS - 1) :], cursor]  # most recent last
        return cursor

    def positions(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        return self._interpolate(t, self.leg_at(t))

    def positions_of(self, t: float, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`positions` of ``clients``: only their cursor entries moved on (the others
        catch up when asked for) and interpolated, in one compiled loop
        (:mod:`~mecsim.net.waypoint_kernel`; multi-cell runs only)."""
        from mecsim.net.waypoint_kernel import positions_of  # numba: multi-cell runs only

        cursor = self._drawn_cursor(t)
        clients = np.asarray(clients, dtype=np.int64)
        x, y = positions_of(t, clients, cursor.index, cursor.legs, self._legs, float(self.pause_s))
        cursor.t = t
        return x, y

    @staticmethod
    def _interpolate(t: float, legs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        depart, arrive, x0, y0, x1, y1 = legs
        span = arrive - depart
        moving = span > 0  # arrive > depart (a paused leg has none)
        done = np.where(moving, (t - depart) / np.where(moving, span, 1.0), 1.0)
        done = np.minimum(np.maximum(done, 0.0), 1.0)
        return x0 + done * (x1 - x0), y0 + done * (y1 - y0)


class GaussMarkov(Trajectories):
    """Gauss-Markov mobility: speed and direction with memory, updated every ``step_s``."""

    moving = True
    EDGE = 0.1
    """Within this fraction of the area's size of an edge, the mean direction turns inward."""

    def __init__(
        self,
        x_m: np.ndarray,
        y_m: np.ndarray,
        area: Area,
        speed_mps: tuple[float, float],
        memory: float,
        step_s: float,
        seed: int,
    ) -> None:
        super().__init__(x_m, y_m)
        self.area, self.speed, self.memory, self.step_s, self.seed = (
            area, speed_mps, memory, step_s, seed
        )  # fmt: skip
        self.mean_speed = 0.5 * (speed_mps[0] + speed_mps[1])
        self.sigma_speed = 0.25 * (speed_mps[1] - speed_mps[0])
        rng = numpy_rng(seed, "mobility", "start")
        n = len(self.x0)
        self._speed = np.full(n, self.mean_speed)
        self._direction = rng.uniform(0.0, 2 * math.pi, n)
        self._mean_direction = self._direction.copy()
        self.xs, self.ys = [self.x0], [self.y0]

    @property
    def max_speed_mps(self) -> float:
        """Speeds are clipped to the range, and a mirrored step is no longer than its path."""
        return float(self.speed[1])

    def _step(self) -> None:
        k = len(self.xs) - 1
        rng = numpy_rng(self.seed, "mobility", "step", k)
        n, a = len(self.x0), self.memory
        x, y = self.xs[-1], self.ys[-1]
        x_min, y_min, x_max, y_max = self.area
        to_x = x + self._speed * np.cos(self._direction) * self.step_s
        to_y = y + self._speed * np.sin(self._direction) * self.step_s
        to_x, to_y = _mirror(to_x, x_min, x_max), _mirror(to_y, y_min, y_max)
        self.xs.append(to_x)
        self.ys.append(to_y)
        edge_x, edge_y = self.EDGE * (x_max - x_min), self.EDGE * (y_max - y_min)
        near = (
            (to_x < x_min + edge_x) | (to_x > x_max - edge_x)
            | (to_y < y_min + edge_y) | (to_y > y_max - edge_y)
        )  # fmt: skip
        inward = np.arctan2(0.5 * (y_min + y_max) - to_y, 0.5 * (x_min + x_max) - to_x)
        mean_direction = np.where(near, inward, self._mean_direction)
        noise = math.sqrt(1.0 - a * a)
        self._speed = np.clip(
            a * self._speed + (1 - a) * self.mean_speed + noise * self.sigma_speed * rng.standard_normal(n),
            self.speed[0],
            self.speed[1],
        )  # fmt: skip
        self._direction = (
            a * self._direction + (1 - a) * mean_direction + noise * (math.pi / 4) * rng.standard_normal(n)
        )  # fmt: skip

    def positions(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        k = int(t // self.step_s)
        while len(self.xs) < k + 2:
            self._step()
        done = min(max(t / self.step_s - k, 0.0), 1.0)
        x0, x1, y0, y1 = self.xs[k], self.xs[k + 1], self.ys[k], self.ys[k + 1]
        return x0 + done * (x1 - x0), y0 + done * (y1 - y0)


def _mirror(v: np.ndarray, low: float, high: float) -> np.ndarray:
    """``v`` reflected at the walls ``low`` and ``high`` until inside them."""
    span = high - low
    if span <= 0:
        return np.full_like(v, low)
    u = np.mod(v - low, 2 * span)
    return low + np.where(u > span, 2 * span - u, u)


@dataclass(frozen=True)
class Trace:
    """Rows of a mobility trace, sorted by client then time."""

    t: np.ndarray
    client: np.ndarray
    x: np.ndarray
    y: np.ndarray


class TraceMobility(Trajectories):
    """Positions interpolated linearly in time between a trace's rows, per client."""

    moving = True

    def __init__(self, x_m: np.ndarray, y_m: np.ndarray, trace: Trace) -> None:
        super().__init__(x_m, y_m)
        n = len(self.x0)
        counts = np.bincount(trace.client, minlength=n)
        width = max(int(counts.max(initial=0)), 1)
        self.t = np.full((n, width), math.inf)
        self.x = np.repeat(self.x0[:, None], width, axis=1)
        self.y = np.repeat(self.y0[:, None], width, axis=1)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.arange(len(trace.t)) - first[trace.client]
        self.t[trace.client, slot] = trace.t
        self.x[trace.client, slot] = trace.x
        self.y[trace.client, slot] = trace.y
        last = np.maximum(counts - 1, 0)  # pad each client's row with its last position
        pad = np.arange(width)[None, :] > last[:, None]
        self.x = np.where(pad, self.x[np.arange(n), last][:, None], self.x)
        self.y = np.where(pad, self.y[np.arange(n), last][:, None], self.y)
        self.x0, self.y0 = self.positions(0.0)

    @property
    def max_speed_mps(self) -> float | None:
        """The fastest move between a client's consecutive rows (None: two rows at one time
        in different places)."""
        with np.errstate(invalid="ignore"):  # inf - inf where rows are padded
            dt = np.diff(self.t, axis=1)
        step = np.hypot(np.diff(self.x, axis=1), np.diff(self.y, axis=1))
        moved = step > 0
        if not moved.any():
            return 0.0
        if not (dt[moved] > 0).all():
            return None
        return float(np.max(step[moved] / dt[moved]))

    def positions(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.t)
        after = (self.t <= t).sum(axis=1)  # rows at or before t
        lo = np.maximum(after - 1, 0)
        hi = np.minimum(after, self.t.shape[1] - 1)
        rows = np.arange(n)
        t0, t1 = self.t[rows, lo], self.t[rows, hi]
        with np.errstate(invalid="ignore", divide="ignore"):
            done = np.where(np.isfinite(t1) & (t1 > t0), (t - t0) / (t1 - t0), 0.0)
        done = np.where(after == 0, 0.0, np.clip(done, 0.0, 1.0))
        x0, x1 = self.x[rows, lo], self.x[rows, hi]
        y0, y1 = self.y[rows, lo], self.y[rows, hi]
        return x0 + done * (x1 - x0), y0 + done * (y1 - y0)


def read_trace(path: str, count: int | None = None) -> Trace:
    """A mobility trace CSV (columns ``t``, ``client``, ``x``, ``y``: s, id, m, m); a
    ValueError names the file, the row and what is wrong."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the mobility trace {path}: {error}") from None
    missing = [c for c in ("t", "client", "x", "y") if c not in frame.columns]
    if missing:
        raise ValueError(f"{path} lacks column(s) {', '.join(missing)}; it needs t, client, x, y")
    values = {
        c: pd.to_numeric(frame[c], errors="coerce").to_numpy(float) for c in "t client x y".split()
    }
    for column, v in values.items():
        bad = np.flatnonzero(~np.isfinite(v) | ((v < 0) if column in ("t", "client") else False))
        if len(bad):
            raise ValueError(
                f"{path} row {int(bad[0]) + 2}: {column} = {str(frame[column].iloc[bad[0]])} is not "
                f"a finite{' non-negative' if column in ('t', 'client') else ''} number"
            )
    client = values["client"].astype(np.int64)
    if np.any(client != values["client"]) or (count is not None and np.any(client >= count)):
        row = int(np.flatnonzero((client != values["client"]) | (client >= (count or 2**62)))[0])
        raise ValueError(
            f"{path} row {row + 2}: client {values['client'][row]:g} is not a client id "
            f"(0 to {(count or 1) - 1})"
        )
    order = np.lexsort((values["t"], client))
    t, client = values["t"][order], client[order]
    same = client[1:] == client[:-1]
    if np.any(same & (t[1:] <= t[:-1])):
        k = int(np.flatnonzero(same & (t[1:] <= t[:-1]))[0])
        raise ValueError(
            f"{path}: client {client[k]} has two rows at t = {t[k]:g} s; each client's times "
            "must differ"
        )
    return Trace(t, client, values["x"][order], values["y"][order])
