"""Open receptions of an event-driven medium, in arrays whose rows keep their place.

:class:`~mecsim.channels.fluid.Slots` packs the open receptions and repacks them at
every end, so a reception's position changes; the event-driven medium
(:mod:`mecsim.channels.event_medium`) keeps per-reception state between the
instants it touches a reception (its anchor, the interference it held there, its
place in the event log, a bound on its completion), so a row keeps its index for
the reception's whole life and a closed row goes on a free list. Besides
:data:`~mecsim.channels.fluid.FIELDS` a row holds:

- ``anchor``: when its ``remaining`` and ``sinr_time`` were last brought up to date;
- ``heard``: the interference it held from ``anchor``; ``at``: how many events of its
  direction's log were counted in ``heard``;
- ``share_b`` / ``share_p``: the band and power of its transmitter's share;
- ``rate`` / ``sinr``: its rate and SINR from ``anchor``, ``done_at``: when it ends,
  its block ends or its deadline passes if nothing else changes;
- ``key``: a time before which it cannot end, its block cannot end and its deadline
  cannot pass, whatever the others do (its bits at the rate it would have with only
  ``floor`` of interference from other cells); ``stamp``: bumped at each new key (the
  :class:`~mecsim.channels.key_queue.KeyQueue` entry of an older key is stale);
- ``floor``: interference it hears at least until the next tick of moving clients (from
  the senders sure to stay on the air until then; 0 where none is known).
"""

from __future__ import annotations

import copy
import heapq

import numpy as np

from mecsim.channels.fluid import FIELDS
from mecsim.channels.sharing import Reception

STATE = ("anchor", "heard", "floor", "share_b", "share_p", "rate", "sinr", "done_at", "key")
INTS = ("tx", "tr", "client", "at", "rx_cell", "stamp")


class Rows:
    """Open receptions in arrays of stable rows (see the module docstring)."""

    def __init__(self, capacity: int = 64) -> None:
        self.a: dict[str, np.ndarray] = {f: np.zeros(capacity) for f in (*FIELDS, *STATE)}
        self.a.update({f: np.zeros(capacity, dtype=np.int64) for f in INTS})
        self.up = np.zeros(capacity, dtype=bool)
        self.worst = np.zeros(capacity, dtype=bool)
        self.any_worst = False
        """Whether a row of a fixed-rate multicast was ever added (if not, ``worst`` is all
        False and the medium skips looking at it)."""
        self.alive = np.zeros(capacity, dtype=bool)
        self.objects: list[Reception | None] = [None] * capacity
        self.free = list(range(capacity))
        """Closed rows, a heap: the lowest is reused first, so open rows stay packed low."""
        self.high = 0
        """One more than the highest open row: scans stop there (:attr:`live`)."""
        self.count = 0
        self._per_client = np.zeros(0, dtype=np.int64)
        """Open rows per client (grown to the highest client seen)."""

    def __len__(self) -> int:
        return self.count

    def index(self) -> np.ndarray:
        """The open rows."""
        return np.flatnonzero(self.live)

    @property
    def live(self) -> np.ndarray:
        """``alive`` up to the highest open row (a view): what a scan of open rows reads."""
        return self.alive[: self.high]

    def _grow(self, need: int) -> None:
        old = len(self.alive)
        size = max(2 * old, old + need)
        extra = size - old
        self.a = {f: np.concatenate([v, np.zeros(extra, dtype=v.dtype)]) for f, v in self.a.items()}
        self.up = np.concatenate([self.up, np.zeros(extra, dtype=bool)])
        self.worst = np.concatenate([self.worst, np.zeros(extra, dtype=bool)])
        self.alive = np.concatenate([self.alive, np.zeros(extra, dtype=bool)])
        self.objects += [None] * extra
        self.free += range(old, size)  # larger than every closed row: still a heap

    def add(self, receptions: list[Reception], columns: dict[str, object]) -> np.ndarray:
        """Put ``receptions`` in free rows with ``columns`` (a list per reception or one
        value for all); return their rows."""
        n = len(receptions)
        if len(self.free) < n:
            self._grow(n - len(self.free))
        taken = [heapq.heappop(self.free) for _ in range(n)]
        rows = np.array(taken, dtype=np.int64)
        self.high = max(self.high, max(taken, default=-1) + 1)
        one = taken[0] if n == 1 else -1  # one row: scalar stores, no fancy indexing
        a = self.a
        for f, values in columns.items():
            column = a[f] if f in a else getattr(self, f)
            if one < 0:
                column[rows] = values
            else:
                column[one] = values[0] if isinstance(values, list | np.ndarray) else values
        self.alive[rows] = True
        worst = columns.get("worst", False)  # np.any only when it may be an array
        self.any_worst = self.any_worst or (worst is not False and bool(np.any(worst)))
        for i, r in zip(taken, receptions, strict=True):
            self.objects[i] = r
        self.count += n
        self._count_clients(a["client"][rows].tolist(), 1)
        return rows

    def _count_clients(self, clients: list[int], change: int) -> None:
        """``change`` the open rows of each of ``clients`` (grown to the highest client)."""
        if clients and max(clients) >= len(self._per_client):
            grown = np.zeros(2 * max(clients) + 1, dtype=np.int64)
            grown[: len(self._per_client)] = self._per_client
            self._per_client = grown
        for c in clients:
            self._per_client[c] += change

    def open_of(self, clients: np.ndarray) -> np.ndarray:
        """How many open rows each of ``clients`` has."""
        counts = self._per_client
        inside = clients < len(counts)
        return np.where(inside, counts[np.where(inside, clients, 0)], 0)

    def write_back(self, rows: np.ndarray) -> None:
        """Copy the rows' progress into their reception objects."""
        a = self.a
        for i in rows.tolist():
            r = self.objects[i]
            assert r is not None
            r.remaining = float(a["remaining"][i])
            r.sinr_time = float(a["sinr_time"][i])
            r.block = int(a["block"][i])

    def remove(self, rows: np.ndarray) -> list[Reception]:
        """Close ``rows`` (their objects written back first); return their objects."""
        self.write_back(rows)
        gone = [self.objects[i] for i in rows.tolist()]
        self.alive[rows] = False
        self._count_clients(self.a["client"][rows].tolist(), -1)
        for i in rows.tolist():
            self.objects[i] = None
            heapq.heappush(self.free, i)
        self.count -= len(rows)
        if self.high and not self.alive[self.high - 1]:
            below = np.flatnonzero(self.alive[: self.high])
            self.high = int(below[-1]) + 1 if len(below) else 0
        return gone  # type: ignore[return-value]

    def copy(self) -> tuple[Rows, dict[int, Reception]]:
        """A copy with copied reception objects, and the map ``id(original) -> copy``."""
        twin = Rows(0)
        twin.a = {f: v.copy() for f, v in self.a.items()}
        twin.up, twin.worst, twin.alive = self.up.copy(), self.worst.copy(), self.alive.copy()
        twin.any_worst = self.any_worst
        twin.objects = [None if r is None else copy.copy(r) for r in self.objects]
        twin.free, twin.count, twin.high = list(self.free), self.count, self.high
        twin._per_client = self._per_client.copy()
        twins = {id(r): c for r, c in zip(self.objects, twin.objects, strict=True) if r is not None}
        return twin, twins  # type: ignore[return-value]


class Log:
    """Transmitters turning on (+1) and off (-1) in one direction, in order."""

    def __init__(self, capacity: int = 256) -> None:
        self.t = np.zeros(capacity)
        self.tx = np.zeros(capacity, dtype=np.int64)
        self.sign = np.zeros(capacity)
        self.cell = np.zeros(capacity, dtype=np.int64)
        self.n = 0

    def append(self, t: float, tx: int, sign: float, cell: int) -> None:
        if self.n == len(self.t):
            self.t, self.tx, self.sign, self.cell = (
                np.concatenate([v, np.zeros_like(v)])
                for v in (self.t, self.tx, self.sign, self.cell)
            )
        self.t[self.n], self.tx[self.n], self.sign[self.n], self.cell[self.n] = t, tx, sign, cell
        self.n += 1

    def copy(self) -> Log:
        twin = Log(0)
        twin.t, twin.tx, twin.sign, twin.cell = (
            v.copy() for v in (self.t, self.tx, self.sign, self.cell)
        )
        twin.n = self.n
        return twin
