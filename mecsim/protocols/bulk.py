"""A compute-and-wait round in bulk: numpy instead of one SimPy process per client.

In a compute-and-wait round on static links (no fading, deadline, faults,
drawn interference or shared uplink band; see
:meth:`~mecsim.net.network.Network.closed_form_blocker`) with a broadcast
downlink, every selected client does the same thing: receive the broadcast,
run its tasks, upload. Each activity's times then follow in closed form from
the one before (:meth:`~mecsim.net.network.Network.closed_form_broadcast`,
:func:`~mecsim.learning.devices.compute_seconds`,
:meth:`~mecsim.net.network.Network.closed_form_uploads`), so this module computes
them for all clients at once and records the rows the per-client processes
would have recorded, in the order they would have.

Timing lives in one place: every rate, duration and energy here comes from
the functions the event engine calls, applied to arrays
(:func:`~mecsim.channels.link.link_rate`; :func:`~mecsim.channels.sharing.send_time`,
:func:`~mecsim.channels.sharing.step_length` and
:func:`~mecsim.channels.sharing.finish_within`, the steps of
:meth:`SharedTransmitter.advance <mecsim.channels.sharing.SharedTransmitter.advance>`;
:func:`~mecsim.learning.devices.compute_seconds`, :func:`~mecsim.learning.devices.energy_j`;
:func:`~mecsim.channels.sharing.mean_sinr_db`,
:func:`~mecsim.channels.sharing.effective_rate`). What only this module does
is the ordering:

* The engine orders simultaneous events by when they were scheduled (SimPy's
  event id). When no two client events of the round share a time, that is
  simply time order (the broadcast's receptions that end together fire in
  the radio's watch order).
* Otherwise :func:`_replay_order` replays SimPy's queue for the round's
  events (time, priority, id), scheduling each one when its predecessor is
  processed, exactly as the processes would.

The clock still belongs to SimPy: the round ends with one timeout to the
instant the last client finished. Event times are the clock's own floating-
point values (``now + delay``), not rounded ones, so the tables are identical
to the per-client path's (``tests/protocols/test_bulk_rounds.py`` checks this).
``execution.bulk_rounds = false`` turns the path off.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mecsim.algorithms.base import SERVER, Upload
from mecsim.channels.sharing import PermanentOutage
from mecsim.common.errors import ConfigError
from mecsim.common.gc_pause import paused_gc
from mecsim.engine.recorder import EVENT_COLUMNS
from mecsim.engine.simulation import Process, Simulation
from mecsim.executors import JobResult
from mecsim.learning.devices import compute_seconds, energy_j
from mecsim.learning.state import Payload, by_identity, payload_nbytes, state_nbytes
from mecsim.net.radio import ClosedForm


def bulk_downlink(
    sim: Simulation, selected: Sequence[int], payloads: dict[int, Payload | None]
) -> ClosedForm | None:
    """The round's broadcast in closed form, or None when the round needs the engine."""
    if not sim.bulk_rounds or sim.faults is not None or len(selected) < 2:
        return None
    network = sim.network
    if network.closed_form_blocker() is not None or network.server_busy():
        return None
    if not (sim.algorithm.broadcast and network.config.downlink.mode == "broadcast"):
        return None
    now = sim.env.now
    if any(sim.busy_until[c] > now for c in selected):
        return None
    nbytes = payload_nbytes(payloads[selected[0]])
    if nbytes <= 0:
        return None
    return network.closed_form_broadcast(selected, nbytes, now)


@dataclass
class _Rows:
    """The round's rows, by kind, each with the clock time it is recorded at."""

    columns: dict[str, list[np.ndarray]]
    time: list[np.ndarray]

    def add(self, time: np.ndarray, base: dict, **columns: np.ndarray | float | int) -> np.ndarray:
        """Append rows recorded at ``time``: ``base`` (see :func:`_row`) with ``columns``
        overriding its defaults; return their row numbers."""
        first = sum(len(t) for t in self.time)
        n = len(time)
        columns = {**base, **columns}
        for name in EVENT_COLUMNS:
            value = columns[name]
            if isinstance(value, str):  # one shared str (np.full would copy it n times)
                value, text = np.empty(n, dtype=object), value
                value.fill(text)
            elif np.ndim(value) == 0:
                value = np.full(n, value)
            self.columns[name].append(np.asarray(value))
        self.time.append(np.asarray(time, dtype=float))
        return np.arange(first, first + n)


def compute_and_wait_clients(
    sim: Simulation,
    round_: int,
    down: ClosedForm,
    results: dict[int, JobResult],
    arrived: list[Upload],
) -> Process:
    """Every selected client of a compute-and-wait round (see the module docstring)."""
    with paused_gc():  # a row, a commit and an upload per client, and no cycles
        end = _record_clients(sim, round_, down, results, arrived)
    yield sim.env.timeout(_delay_to(sim.env.now, end))


def _record_clients(
    sim: Simulation,
    round_: int,
    down: ClosedForm,
    results: dict[int, JobResult],
    arrived: list[Upload],
) -> float:
    """Record the clients' rows, commit their states, append their uploads to ``arrived``;
    return the instant the last client finished. (A function, not the generator, so the
    round's arrays are freed before the clock moves.)"""
    bulk = _BulkRound(sim, round_, down.clients)
    bulk.downlink(down)
    outcomes = [results[c] for c in down.clients.tolist()]
    bulk.tasks(outcomes)
    finish = bulk.uploads(outcomes, arrived)
    bulk.flush()
    return finish


class _BulkRound:
    """One bulk round's rows as they are built: the radio's timeline, then each client's
    tasks and upload, each row linked to the row whose processing schedules it."""

    def __init__(self, sim: Simulation, round_: int, clients: np.ndarray) -> None:
        self.sim, self.round, self.clients = sim, round_, clients
        self.t0 = sim.env.now
        self.devices = sim.device_arrays
        self.rows = _Rows({name: [] for name in EVENT_COLUMNS}, [])
        self.links: list[tuple[np.ndarray, np.ndarray]] = []
        """(rows, their parents): the row whose processing schedules each row."""

    def downlink(self, down: ClosedForm) -> None:
        """The transmission's and the receptions' rows, at the times the radio's delivery
        process fires them (the transmission in watch order 0, then receptions by client)."""
        n, t0, clients = len(self.clients), self.t0, self.clients
        tx_end = float(down.end.max())
        ends = np.concatenate([[tx_end], down.end])
        self.timeline = np.lexsort((np.arange(n + 1), ends))
        self.unit_time, self.unit_of = _deliveries(ends[self.timeline].tolist(), t0)
        fired = np.empty(n + 1, dtype=float)  # clock time each timeline entry fires at
        fired[self.timeline] = np.asarray(self.unit_time)[self.unit_of]
        position = np.empty(n + 1, dtype=np.int64)
        position[self.timeline] = np.arange(n + 1)
        send = self.rows.add(
            fired[:1],
            _row(self.round, SERVER, "downlink-send", "down", "sender", t0, tx_end),
            bytes=int(down.bits[0]) // 8,
            energy_j=energy_j(self.sim.network.server_tx_power_w, float(down.step[0])),
        )
        downloads = self.rows.add(
            fired[1:],
            _row(self.round, clients, "download", "down", "receiver", down.start, down.end),
            bytes=down.bits // 8,
            energy_j=energy_j(self.devices["rx_power_w"][clients], down.duration_s),
            rate_bps=down.effective_rate_bps,
            snr_db=down.mean_sinr_db,
        )
        self.sub = np.zeros(n + 1, dtype=np.int64)  # order among rows one radio event fires
        self.sub[send], self.sub[downloads] = position[0], position[1:]
        self.now = fired[1:].copy()  # each client's clock: its last activity's end
        self.last = downloads.copy()  # and that activity's row

    def tasks(self, outcomes: list[JobResult]) -> None:
        """The round's tasks, one after another from the download (FLOPs / device FLOP/s);
        then commit each client's state, ready when its last task ends."""
        sim, clients, now, last = self.sim, self.clients, self.now, self.last
        busy = np.array([sim.busy_until[c] for c in clients.tolist()])
        flops_per_s = self.devices["flops_per_s"][clients]
        power_w = self.devices["power_w"][clients]
        task_flops = [r.task_flops for r in outcomes]
        for task in sim.tasks(self.round):
            flops = np.fromiter((f.get(task.name, -1) for f in task_flops), np.int64, len(now))
            ran = flops >= 0  # -1: the job did not run the task
            if not ran.any():
                continue
            seconds = compute_seconds(flops[ran], flops_per_s[ran])
            start = now[ran]
            end = start + seconds
            computed = self.rows.add(
                end,
                _row(self.round, clients[ran], f"compute:{task.name}", "none", "none", start, end),
                duration_s=seconds,
                flops=flops[ran],
                energy_j=energy_j(power_w[ran], seconds),
            )
            self.links.append((computed, last[ran]))
            now[ran], last[ran] = end, computed
            busy[ran] = np.maximum(busy[ran], end)
        state_bytes = by_identity(state_nbytes)  # cost-only job classes share states
        for c, r, b, t in zip(clients.tolist(), outcomes, busy.tolist(), now.tolist(), strict=True):
            sim.busy_until[c] = b
            sim.commit(c, r.state, t, state_bytes(r.state))

    def uploads(self, outcomes: list[JobResult], arrived: list[Upload]) -> float:
        """Uploads on each client's own band from the end of its tasks; return the instant
        the last client finished."""
        sim, now = self.sim, self.now
        sends = np.array([r.upload is not None for r in outcomes], dtype=bool)
        finish = now.copy()
        if not sends.any():
            return float(finish.max())
        senders = np.flatnonzero(sends).tolist()
        clients = self.clients[sends]
        sizes = by_identity(payload_nbytes)
        nbytes = np.array([sizes(outcomes[i].upload) for i in senders], np.int64)
        up = sim.network.closed_form_uploads(clients, nbytes, now[sends])
        if up is None:
            raise ConfigError("network.min_snr_db", str(PermanentOutage(clients.tolist())))
        done = up.start + (up.end - up.start)  # the clock's time: granted + timeout
        uploaded = self.rows.add(
            done,
            _row(self.round, clients, "upload", "up", "sender", up.start, up.end),
            bytes=nbytes,
            energy_j=energy_j(sim.network.link_constants()["tx_power_w"][clients], up.duration_s),
            rate_bps=up.effective_rate_bps,
            snr_db=up.mean_sinr_db,
        )
        self.links.append((uploaded, self.last[sends]))
        finish[sends] = done
        samples = sim.num_samples
        arrived += [
            Upload(c, outcomes[i].upload, samples[c])
            for i, c in zip(senders, clients.tolist(), strict=True)
        ]
        return float(finish.max())

    def flush(self) -> None:
        """Hand the rows to the recorder in the order SimPy would have processed them."""
        rows, n = self.rows, len(self.clients)
        time = np.concatenate(rows.time)
        sub = np.concatenate([self.sub, np.zeros(len(time) - len(self.sub), dtype=np.int64)])
        scheduled = np.concatenate([self.unit_time, time[n + 1 :]])
        if np.unique(scheduled).size == scheduled.size:
            order = np.lexsort((sub, time))  # no ties: time order
        else:
            order = _replay_order(time, self.unit_time, self.unit_of, self.timeline, self.links)
        columns = rows.columns
        # one column at a time, each column's segments freed as it is ordered
        self.sim.recorder.extend(
            {name: np.concatenate(columns.pop(name))[order] for name in EVENT_COLUMNS}
        )


def _row(
    round_: int,
    client: np.ndarray | int,
    phase: str,
    direction: str,
    role: str,
    t_start: np.ndarray | float,
    t_end: np.ndarray | float,
) -> dict:
    """The columns every row has, with the defaults of :meth:`Recorder.event`."""
    return {
        "round": round_,
        "job": -1 if np.ndim(client) == 0 and client == SERVER else round_,
        "client": client,
        "phase": phase,
        "direction": direction,
        "role": role,
        "t_start": t_start,
        "t_end": t_end,
        "duration_s": np.subtract(t_end, t_start),
        "bytes": 0,
        "flops": 0,
        "energy_j": 0.0,
        "rate_bps": math.nan,
        "snr_db": math.nan,
    }


def _deliveries(ends: list[float], t0: float) -> tuple[list[float], np.ndarray]:
    """The radio's delivery process (``Radio._deliver``) on a sorted timeline: the clock
    time of each wake-up (unit 0: the process's start at ``t0``) and the unit each entry
    fires in. A wake-up is a timeout ``at - now``, so its time is ``now + (at - now)``."""
    now = t0
    times = [t0]
    unit = np.empty(len(ends), dtype=np.int64)
    for k, at in enumerate(ends):
        if at > now:
            now = now + (at - now)
            times.append(now)
        unit[k] = len(times) - 1
    return times, unit


def _replay_order(
    time: np.ndarray,
    unit_time: list[float],
    unit_of: np.ndarray,
    timeline: np.ndarray,
    links: list[tuple[np.ndarray, np.ndarray]],
) -> np.ndarray:
    """The order SimPy processes the round's events in when some share a time: its queue
    (time, priority, event id), each event scheduled when the one before it is processed.

    Row 0 is the transmission's end and rows 1..n the receptions, fired by the radio's
    wake-ups (``unit_time``); every other row is scheduled by its parent row (``links``:
    pairs of row arrays, children and their parents).
    """
    urgent, normal = 0, 1
    children: dict[int, list[int]] = {}
    for rows, parents in links:
        for child, p in zip(rows.tolist(), parents.tolist(), strict=True):
            children.setdefault(p, []).append(child)
    units: list[list[int]] = [[] for _ in unit_time]
    for k, entry in enumerate(timeline.tolist()):
        units[int(unit_of[k])].append(entry)  # timeline entry e is row e
    eid = itertools.count()
    queue = [(unit_time[0], urgent, next(eid), True, 0)]  # the delivery process starts
    order = []
    while queue:
        t, _, _, is_unit, i = heapq.heappop(queue)
        if is_unit:
            for row in units[i]:
                heapq.heappush(queue, (t, normal, next(eid), False, row))
            if i + 1 < len(units):
                heapq.heappush(queue, (unit_time[i + 1], normal, next(eid), True, i + 1))
            continue
        order.append(i)
        for child in children.get(i, ()):
            heapq.heappush(queue, (float(time[child]), normal, next(eid), False, child))
    return np.asarray(order, dtype=np.int64)


def _delay_to(now: float, t: float) -> float:
    """The timeout that brings the clock from ``now`` to exactly ``t`` (``now + d == t``)."""
    d = t - now
    while now + d < t:
        d = math.nextafter(d, math.inf)
    while now + d > t:
        d = math.nextafter(d, -math.inf)
    return max(d, 0.0)
