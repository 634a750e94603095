"""Collects the rows of the events and rounds tables during a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

EVENT_COLUMNS = [
    "round",
    "job",
    "client",
    "phase",
    "direction",
    "role",
    "t_start",
    "t_end",
    "duration_s",
    "bytes",
    "flops",
    "energy_j",
    "rate_bps",
    "snr_db",
]
"""One row per timed activity; ``client`` is -1 for the server.

``round`` is the round (asynchronous protocols: the server update) the
activity belongs to; ``job`` identifies the client job (the round in
synchronous protocols; -1 for server rows); ``direction`` is ``up``, ``down``
or ``none`` and ``role`` ``sender``, ``receiver`` or ``none``. Bytes moved in a
direction are the sender rows' for ``up`` and the receiver rows' for ``down``.
``duration_s`` is stored where it is computed (``flops / FLOP/s``, a transfer's
air time), not recomputed as ``t_end - t_start``: late in a long run the
difference of two absolute times loses the low digits of a nanosecond step,
and a row's energy is its power times this duration.
"""

SERVER = -1
_INTEGER_COLUMNS = dict.fromkeys(["round", "job", "client", "bytes", "flops"], "int64")
_DTYPES = {
    **dict.fromkeys(EVENT_COLUMNS, np.float64),
    **dict.fromkeys(["phase", "direction", "role"], object),
    **_INTEGER_COLUMNS,
}


class Recorder:
    """Append-only rows for the ``events`` and ``rounds`` tables.

    Events arrive one at a time (:meth:`event`) or as columns of many rows
    (:meth:`extend`, bulk rounds); they are kept in arrival order.
    """

    def __init__(self) -> None:
        self._segments: list[list[tuple] | dict[str, np.ndarray] | pd.DataFrame] = []
        self._events: list[tuple] = []
        """The open segment of single rows."""
        self._count = 0
        self._frame: pd.DataFrame | None = None
        self._rounds: list[dict[str, Any]] = []
        self.cells: Any = None
        """Each client's cell, in a run with several cells: the events table then gains a
        ``cell`` column (the client's cell; a cell's radio for its sends; -1 for the
        server's other rows)."""
        self._cells: list[int] = []
        self.history: Any = None
        """A scheduler's :class:`~mecsim.policies.history.ClientHistory`, told of every
        client row (its energy, its SINR), if the policy keeps one."""
        self._decisions: list[tuple[int, float, list[int], list[float], str, str | None]] = []

    def __len__(self) -> int:
        """Event rows recorded so far."""
        return self._count

    def event(
        self,
        round_: int,
        client: int,
        phase: str,
        t_start: float,
        t_end: float,
        *,
        duration_s: float | None = None,
        job: int | None = None,
        direction: str = "none",
        role: str = "none",
        nbytes: int = 0,
        flops: int = 0,
        energy_j: float = 0.0,
        rate_bps: float = float("nan"),
        snr_db: float = float("nan"),
        cell: int | None = None,
    ) -> None:
        """Record one activity (times in simulated seconds; ``duration_s`` defaults to
        ``t_end - t_start``; ``cell`` for a cell's radio's sends)."""
        if job is None:
            job = -1 if client == SERVER else round_
        if self.history is not None and client >= 0:
            self.history.row(client, energy_j, direction, snr_db)
        if self.cells is not None:
            self._cells.append(cell if client == SERVER and cell is not None else
                               -1 if client == SERVER else self.cells[client])  # fmt: skip
        if not self._segments or self._segments[-1] is not self._events:
            self._events = []
            self._segments.append(self._events)
        self._count += 1
        self._frame = None
        self._events.append(
            (
                round_,
                job,
                client,
                phase,
                direction,
                role,
                t_start,
                t_end,
                t_end - t_start if duration_s is None else duration_s,
                nbytes,
                flops,
                energy_j,
                rate_bps,
                snr_db,
            )
        )

    def extend(self, columns: dict[str, np.ndarray]) -> None:
        """Record many rows at once: one array per column of :data:`EVENT_COLUMNS`."""
        n = len(columns["round"])
        assert self.cells is None, "bulk rounds run with one cell"
        if n:
            self._segments.append({name: columns[name] for name in EVENT_COLUMNS})
            self._count += n
            self._frame = None

    def decide(
        self,
        round_: int,
        t: float,
        clients: list[int],
        values: list[float],
        decision: str = "schedule",
        policy: str | None = None,
    ) -> None:
        """Record a decision at ``t`` about ``clients``: ``schedule`` (the clients chosen,
        each with the score it was ranked by), ``power`` (an upload's power, W),
        ``band`` (an upload's mean band, Hz) or ``band_change`` (its band from ``t`` until
        its next change or its end, Hz); ``policy`` None: the scheduling policy."""
        self._decisions.append((round_, t, clients, values, decision, policy))

    def decisions(self, scheduler: str) -> pd.DataFrame:
        """The decisions table: one row per client and decision (round, t, client,
        decision, policy, value); ``scheduler`` names the scheduling policy."""
        import pandas as pd

        entries = self._decisions
        sizes = [len(d[2]) for d in entries]
        n = sum(sizes)

        def repeated(i: int) -> np.ndarray:
            return np.repeat(np.array([d[i] for d in entries], dtype=object), sizes)

        return pd.DataFrame(
            {
                "round": np.repeat([d[0] for d in entries], sizes).astype(np.int64),
                "t": np.repeat([d[1] for d in entries], sizes).astype(float),
                "client": np.fromiter((c for d in entries for c in d[2]), np.int64, n),
                "decision": pd.Series(repeated(4), dtype=object),
                "policy": pd.Series(
                    [scheduler if p is None else p for p in repeated(5)], dtype=object
                ),
                "value": np.fromiter((v for d in entries for v in d[3]), float, n),
            }
        )

    def round(self, **row: Any) -> None:
        """Record one round's summary row."""
        self._rounds.append(row)

    def events(self) -> pd.DataFrame:
        """The events table (a new frame; it is built once per batch of new rows)."""
        import pandas as pd

        # pandas >= 3 copies on write: a shallow copy is already independent of the cache
        return self._table().copy(deep=int(pd.__version__.split(".")[0]) < 3)

    def _table(self) -> pd.DataFrame:
        """The cached events table, built from the segments recorded since the last build;
        it then replaces them (the rows are kept once).

        Each column is concatenated from the segments' columns and handed to
        pandas without a further copy, one column at a time, the segments'
        parts freed as it goes (a 100,000-client round's rows were held three
        times over by per-segment frames, their concatenation and the cast).
        """
        import pandas as pd  # imported when the first table is built, not at start-up

        if self._frame is None:
            if not self._segments:
                empty = pd.DataFrame([], columns=EVENT_COLUMNS)
                self._frame = empty.astype(_INTEGER_COLUMNS)
                return self._frame
            parts = [_columns(s) for s in self._segments]
            self._segments = []
            columns = {}
            for name in EVENT_COLUMNS:
                pieces = [part.pop(name) for part in parts]
                columns[name] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
            self._frame = pd.DataFrame(columns, copy=False)
            self._segments = [self._frame]
        if self.cells is not None and "cell" not in self._frame:
            self._frame["cell"] = np.asarray(self._cells, dtype=np.int64)
        return self._frame

    def rounds(self) -> pd.DataFrame:
        """The rounds table, its byte columns summed from the events (:func:`bytes_per_round`)."""
        import pandas as pd

        rounds = pd.DataFrame(self._rounds)
        if rounds.empty:
            return rounds
        moved = bytes_per_round(self._table())
        for column in BYTE_FLOWS:
            rounds[column] = rounds["round"].map(moved[column]).fillna(0).astype("int64")
        return rounds


def _columns(segment: list[tuple] | dict[str, np.ndarray] | pd.DataFrame) -> dict[str, Any]:
    """A segment's rows as one array per column of :data:`EVENT_COLUMNS`, typed."""
    if isinstance(segment, dict):
        values = segment
    elif isinstance(segment, list):
        values = dict(zip(EVENT_COLUMNS, zip(*segment, strict=True), strict=True))
    else:  # the table built before: its columns as they are
        return {name: segment[name].to_numpy() for name in EVENT_COLUMNS}
    return {name: np.asarray(values[name], dtype=_DTYPES[name]) for name in EVENT_COLUMNS}


BYTE_FLOWS = {
    "bytes_up": ("up", "sender"),
    "bytes_down": ("down", "receiver"),
    "bytes_down_air": ("down", "sender"),
}
"""The byte columns of the rounds table and summary, and the events' (direction, role)
each sums:

* ``bytes_up`` - what the clients sent (upload senders);
* ``bytes_down`` - what the clients received (download receivers: a broadcast counts
  once per receiver);
* ``bytes_down_air`` - what the server transmitted (its ``downlink-send`` rows: a
  broadcast counts once, a unicast once per client), COMET Table III's convention.
"""


def flow(events: pd.DataFrame, column: str) -> pd.Series:
    """The events rows that byte column ``column`` of :data:`BYTE_FLOWS` sums (a mask)."""
    direction, role = BYTE_FLOWS[column]
    return (events["direction"] == direction) & (events["role"] == role)


def bytes_per_round(events: pd.DataFrame) -> pd.DataFrame:
    """Bytes moved per round, one column per :data:`BYTE_FLOWS` entry."""
    import pandas as pd

    moved = {}
    for column in BYTE_FLOWS:  # columns of the matching rows, not the rows
        mask = flow(events, column)
        moved[column] = events["bytes"][mask].groupby(events["round"][mask]).sum()
    return pd.DataFrame(moved).fillna(0)
