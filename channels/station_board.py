"""Uplink interference at the base stations between ticks: tables and the log since.

An uplink is decoded at its cell's base station and hears ``sum_u P_u h(d_u) min(1, b /
B_u)`` over the co-channel uplinks on the air (:mod:`mecsim.channels.interference`).
Summed over every sender each time a reception starts, a round with N clients on the
air costs N^2. A :class:`StationBoard` keeps, per station, the prefix sums by band of
the senders that were on the air when it was taken
(:func:`~mecsim.channels.kernels.station_tables`) and how long the uplink log was then;
a reception's interference is a lookup in them plus the events logged since
(:func:`~mecsim.channels.kernels.station_heard`): O(log M + events since) for M on the air.

The event medium takes a new board when a tick moves the clients (the gains change),
when the stations' gain table is rebuilt (a new station) and when the events since
outnumber :data:`SLACK` plus an eighth of the senders (a network with no ticks), so a
board costs O(1) per event amortized.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SLACK = 64
"""Events a board takes in before it is retaken, besides an eighth of its senders."""


@dataclass(frozen=True, eq=False)
class StationBoard:
    """Per-station prefix sums of the uplinks on the air at log position ``first``."""

    tick: int
    """The tick whose gains the sums are of."""
    table: tuple
    """The stations' gain table the sums were read from (``Interference._gains``)."""
    first: int
    """Events of the uplink log counted in the sums."""
    senders: int
    """How many uplinks were on the air."""
    bands: np.ndarray
    """Their distinct bands, sorted."""
    ends: np.ndarray
    """How many senders hold each of ``bands`` or a narrower one."""
    full: np.ndarray
    """[sender + 1 x station] prefix sums of ``P h``."""
    scaled: np.ndarray
    """[sender + 1 x station] prefix sums of ``P h / B``."""

    def holds(self, tick: int, table: tuple | None, n: int) -> bool:
        """Whether the board answers for ``tick``, gain ``table`` and a log of ``n``
        events."""
        since = n - self.first
        return (self.tick == tick and self.table is table
                and 0 <= since <= SLACK + self.senders // 8)  # fmt: skip
