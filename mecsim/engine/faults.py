"""Client faults: random dropout and availability traces.

* **Dropout** (``faults.dropout = p``): a client drops out of a job with
  probability ``p``, at a uniformly random point of the job's computation
  (``dropout_per = "round"``: one draw per job), or each task independently
  drops it with probability ``p`` at a uniformly random point of that task
  (``dropout_per = "task"``). The draws come from the ``dropout`` stream of
  (client, job, task), so every executor sees the same faults.
* **Availability** (``faults.availability = "trace.csv"``): a CSV with columns
  ``client,start_s,end_s``, one row per interval in which that client is
  online (FedScale-style traces); clients without a row are always online.
  An offline client is never selected; one that goes offline while computing
  drops at that moment; one found offline when its download ends or its
  upload would start drops then. A transfer under way completes.

A dropped client sends nothing for that job and keeps its previous state; the
protocol carries on with the others. Each drop is a ``fault:dropout`` or
``fault:offline`` event in the events table, after the partial computation
(``compute:<task>`` with the FLOPs done until then). Wait-free personalized
training in the communication window is local and never interrupted.
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from mecsim.common.errors import ConfigError
from mecsim.common.rng import numpy_rng
from mecsim.common.section import Section


class FaultsConfig(Section):
    """``[faults]``: client dropout and availability (see :mod:`mecsim.engine.faults`)."""

    dropout: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="probability that a client drops out of a job (1 would drop every job)",
    )
    dropout_per: Literal["round", "task"] = Field(
        default="round", description="'round': one draw per job; 'task': one draw per task"
    )
    availability: str | None = Field(
        default=None, description="CSV of online intervals: client,start_s,end_s"
    )


FIELD = "faults.availability"
MAX_TIME_S = 1e9
"""Latest time a trace may name (about 32 years): a later one is a mistake of units."""


def read_availability(path: str | Path, num_clients: int) -> dict[int, list[tuple[float, float]]]:
    """Online intervals per client from a trace CSV, checked (sorted, disjoint, finite)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not data
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(FIELD, f"cannot read {path}: {error}") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows or [c.strip() for c in rows[0]] != ["client", "start_s", "end_s"]:
        raise ConfigError(FIELD, f"{path}: the first line must be 'client,start_s,end_s'")
    intervals: dict[int, list[tuple[float, float]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            client, start, end = int(row[0]), float(row[1]), float(row[2])
            if len(row) != 3:
                raise ValueError
        except (ValueError, IndexError):
            raise ConfigError(
                FIELD, f"{path} line {line}: expected an integer client and two numbers"
            ) from None
        if not 0 <= client < num_clients:
            raise ConfigError(
                FIELD, f"{path} line {line}: client {client} is not in 0..{num_clients - 1}"
            )
        if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
            raise ConfigError(
                FIELD, f"{path} line {line}: need finite 0 <= start_s < end_s, got {start}, {end}"
            )
        if start > MAX_TIME_S:
            raise ConfigError(
                FIELD,
                f"{path} line {line}: start_s = {start:g} s is beyond {MAX_TIME_S:g} s (about "
                "32 years); are the times in seconds?",
            )
        intervals.setdefault(client, []).append((start, end))
    for client, spans in intervals.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            if start < end:
                raise ConfigError(FIELD, f"{path}: client {client}'s intervals overlap at {start}")
    return intervals


@dataclass(frozen=True)
class Drop:
    """Where a job's computation stops: after ``seconds`` of task ``task`` (``cause``)."""

    task: int
    seconds: float
    cause: Literal["dropout", "offline"]


class Faults:
    """The run's fault model: who is online when, and where jobs drop out."""

    def __init__(self, config: FaultsConfig, num_clients: int, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.trace = (
            {}
            if config.availability is None
            else read_availability(config.availability, num_clients)
        )
        self._starts = {c: [s for s, _ in spans] for c, spans in self.trace.items()}

    @property
    def active(self) -> bool:
        return self.config.dropout > 0 or bool(self.trace)

    def online(self, client: int, t: float) -> bool:
        """Whether ``client`` is online at ``t``."""
        return self.offline_at(client, t) > t

    def offline_at(self, client: int, t: float) -> float:
        """When ``client``, online at ``t``, goes offline (``t`` if it is offline; inf if never)."""
        spans = self.trace.get(client)
        if spans is None:
            return math.inf
        i = bisect_right(self._starts[client], t) - 1
        if i >= 0 and spans[i][0] <= t < spans[i][1]:
            return spans[i][1]
        return t

    def next_online(self, clients: Sequence[int], t: float) -> float:
        """Earliest time at or after ``t`` when one of ``clients`` is online (inf: never)."""
        best = math.inf
        for c in clients:
            if self.online(c, t):
                return t
            spans = self.trace.get(c, [])
            i = bisect_right(self._starts.get(c, []), t)
            if i < len(spans):
                best = min(best, spans[i][0])
        return best

    def plan(
        self, client: int, job: int, task_seconds: Sequence[float], start: float
    ) -> Drop | None:
        """Where the job's computation (tasks of ``task_seconds``, back to back from
        ``start``) stops, if it does: the earlier of a dropout and going offline."""
        p, drop = self.config.dropout, None
        total = sum(task_seconds)
        if p > 0 and task_seconds:
            if self.config.dropout_per == "round":
                u, v = numpy_rng(self.seed, "dropout", client, job).random(2)
                if u < p:
                    drop = _locate(task_seconds, v * total, "dropout")
            else:
                for i, seconds in enumerate(task_seconds):
                    u, v = numpy_rng(self.seed, "dropout", client, job, i).random(2)
                    if u < p:
                        drop = Drop(i, v * seconds, "dropout")
                        break
        leaves = self.offline_at(client, start) - start
        if leaves < total:
            offline = _locate(task_seconds, leaves, "offline")
            if drop is None or (offline.task, offline.seconds) < (drop.task, drop.seconds):
                drop = offline
        return drop


def _locate(task_seconds: Sequence[float], elapsed: float, cause) -> Drop:
    """The task (and seconds into it) at ``elapsed`` seconds of back-to-back tasks."""
    for i, seconds in enumerate(task_seconds):
        if elapsed < seconds or i == len(task_seconds) - 1:
            return Drop(i, min(max(elapsed, 0.0), seconds), cause)
        elapsed -= seconds
    raise AssertionError("no tasks")
