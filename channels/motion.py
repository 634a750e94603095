"""Moving clients as a medium sees them: positions each tick, serving cells, handovers.

:class:`~mecsim.channels.medium.Medium` takes a :class:`Motion` (built by
:mod:`mecsim.net.network` from the trajectories and the handover schedule): a tick
is a coherence block, ``k tick_s <= t < (k + 1) tick_s``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class Schedule(Protocol):
    """Handovers over time (:class:`mecsim.net.handover.HandoverSchedule`)."""

    interruption_s: float

    def next_after(self, start: float, end: float) -> float: ...
    def between(self, start: float, end: float) -> list: ...
    def cell_of(self, client: int, t: float) -> int: ...


@dataclass
class Motion:
    """Moving clients: positions every tick, their serving cells and handovers."""

    positions: Callable[[float], tuple[np.ndarray, np.ndarray]]
    """``positions(t) -> (x, y)`` of every client, m."""
    schedule: Schedule
    cells: list[tuple[float, float]]
    """Each cell's base station position (its receiver of uplinks)."""
    tick_s: float
    initial: np.ndarray
    """Each client's cell at time 0."""
    restart: bool = False
    """A transfer broken by a handover starts over (else it resumes)."""
    positions_of: Callable[[float, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    """``positions_of(t, clients) -> (x, y)`` of some clients (else ``positions``' rows)."""

    def tick(self, t: float) -> int:
        """The tick ``t`` falls in: ``k tick_s <= t < (k + 1) tick_s``, in the products the
        handover schedule's times are (``t / tick_s`` can round up to ``k`` at a ``t`` just
        below ``k tick_s``, which then started tick ``k`` before its handovers)."""
        k = math.floor(t / self.tick_s)
        if k * self.tick_s > t:
            return k - 1
        return k + 1 if (k + 1) * self.tick_s <= t else k
