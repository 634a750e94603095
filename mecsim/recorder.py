"""Collects the rows of the events and rounds tables during a run."""

from __future__ import annotations

from typing import Any

import pandas as pd

EVENT_COLUMNS = [
    "round",
    "client",
    "phase",
    "t_start",
    "t_end",
    "bytes",
    "flops",
    "energy_j",
    "rate_bps",
    "snr_db",
]
"""One row per timed activity; ``client`` is -1 for the server."""

SERVER = -1


class Recorder:
    """Append-only rows for the ``events`` and ``rounds`` tables."""

    def __init__(self) -> None:
        self._events: list[tuple] = []
        self._rounds: list[dict[str, Any]] = []

    def event(
        self,
        round_: int,
        client: int,
        phase: str,
        t_start: float,
        t_end: float,
        *,
        nbytes: int = 0,
        flops: int = 0,
        energy_j: float = 0.0,
        rate_bps: float = float("nan"),
        snr_db: float = float("nan"),
    ) -> None:
        """Record one activity (times in simulated seconds)."""
        self._events.append(
            (round_, client, phase, t_start, t_end, nbytes, flops, energy_j, rate_bps, snr_db)
        )

    def round(self, **row: Any) -> None:
        """Record one round's summary row."""
        self._rounds.append(row)

    def events(self) -> pd.DataFrame:
        frame = pd.DataFrame(self._events, columns=EVENT_COLUMNS)
        return frame.astype(
            {"round": "int64", "client": "int64", "bytes": "int64", "flops": "int64"}
        )

    def rounds(self) -> pd.DataFrame:
        return pd.DataFrame(self._rounds)
