"""Synchronous protocols: compute-and-wait, wait-free, and semi-synchronous deadline rounds.

* ``compute_and_wait``: the server selects clients and sends the downlink;
  each selected client downloads, runs all of its tasks, uploads, then idles
  until the next broadcast; the server aggregates when the last selected
  upload has arrived.
* ``wait_free`` (Chen et al. 2023, Sec. 3.5, Algorithm 1): a client uploads
  right after the task marked ``uploads`` (the generic model) and runs the
  remaining tasks (the personalized model) during the communication window,
  "until the global generic model is received". ``personal_budget``:

  - ``window`` (default): personalized training runs in the window and stops
    when the next global model has arrived, capped at the task's own schedule
    (E_p epochs of steps; ``max_personal_steps`` overrides the cap). It never
    delays the next round.
  - ``epochs``: the personal task runs its fixed schedule (E_p epochs); if it
    outlasts the window, the client starts the next round late.
  - ``window_uncapped``: like ``window`` with no cap but ``max_personal_steps``.

  A window's step count is ``floor(window / step time)``; its tasks run when
  the window closes (its length is known then) with the payload of the round
  that opened it, and the round is evaluated then, so its personalized
  accuracy includes the window's training (``t_personal``: when it ended). Partial participation (appendix F): with
  ``broadcast_unselected`` every client receives each new global model;
  otherwise an unselected client's window stays open until it next receives
  one.
* ``deadline``: the server aggregates what has arrived ``deadline_s`` after
  the round started; late uploads are dropped or carried into the next
  round's aggregation (``late``), and busy clients are not selected.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import simpy
from pydantic import Field, model_validator

from mecsim.algorithms.base import Task, Upload, schedule_of
from mecsim.common.gc_pause import paused_gc
from mecsim.engine.simulation import Process, Simulation
from mecsim.executors import JobResult
from mecsim.learning.state import Payload
from mecsim.net.radio import Delivery
from mecsim.protocols.bulk import bulk_downlink, compute_and_wait_clients
from mecsim.protocols.chained_clients import chainable, chained_clients
from mecsim.protocols.registry import register_protocol, uploading_task_index
from mecsim.protocols.settings import ProtocolSettings


class ComputeAndWaitSettings(ProtocolSettings):
    """compute_and_wait: only the shared keys."""

    kind: Literal["compute_and_wait"] = "compute_and_wait"


class WaitFreeSettings(ProtocolSettings):
    """wait_free: how long the personalized work of the communication window runs."""

    kind: Literal["wait_free"] = "wait_free"
    personal_budget: Literal["window", "epochs", "window_uncapped"] = Field(
        default="window",
        description="'window': until the next model arrives, at most E_p epochs; "
        "'epochs': exactly E_p epochs, may delay the next round; "
        "'window_uncapped': until the next model arrives",
    )
    max_personal_steps: int | None = Field(
        default=None, ge=1, description="window budgets: cap on personalized steps in one window"
    )
    broadcast_unselected: bool = Field(
        default=False,
        description="partial participation: send every new global model to all clients",
    )

    @model_validator(mode="after")
    def _cap_needs_a_window(self) -> WaitFreeSettings:
        if self.personal_budget == "epochs" and self.max_personal_steps is not None:
            raise ValueError(
                "max_personal_steps caps a window budget; with personal_budget = 'epochs' "
                "set the personal task's epochs or steps instead"
            )
        return self


class DeadlineSettings(ProtocolSettings):
    """deadline: semi-synchronous rounds of fixed length."""

    kind: Literal["deadline"] = "deadline"
    deadline_s: float | None = Field(default=None, gt=0, description="round deadline, s")
    late: Literal["drop", "carry"] = Field(
        default="drop", description="late uploads are dropped or carried into the next round"
    )

    @model_validator(mode="after")
    def _deadline(self) -> DeadlineSettings:
        if self.deadline_s is None:
            raise ValueError("protocol.kind = 'deadline' needs deadline_s (seconds)")
        return self


def _upload(sim: Simulation, round_: int, result: JobResult, arrived: list[Upload]) -> Process:
    """Upload the job's payload; a failed upload (network.max_transfer_s) does not arrive.
    Returns whether the client's part ended well (nothing to send counts as well)."""
    if result.upload is None:
        return True
    if not (yield from sim.upload(round_, result.client, result.upload)):
        return False
    arrived.append(Upload(result.client, result.upload, sim.num_samples[result.client]))
    return True


def _start_round(sim: Simulation, round_: int, selected: Sequence[int]):
    """Prepare the selection's downlinks (timed server work), then start the transfers."""
    payloads = yield from _prepare(sim, round_, selected)
    return payloads, sim.downlink_transfers(round_, payloads)


def _prepare(sim: Simulation, round_: int, selected: Sequence[int]):
    """Prepare the selection's downlinks (timed server work); return the payloads."""
    yield from sim.prepare_downlinks(round_, selected)
    return sim.payloads(selected, round_)


def _caw_client(
    sim: Simulation,
    round_: int,
    delivery: Delivery | None,
    result: JobResult,
    arrived: list[Upload],
) -> Process:
    """Download, every task in order, then upload (a client whose download failed sits out).

    Returns False if the client failed: a transfer that failed, a dropout, going offline.
    """
    if not (yield from sim.download(round_, delivery)):
        return False
    if not sim.still_online(round_, result.client):
        return False
    if not (yield from sim.compute_tasks(round_, result, sim.tasks(round_))):
        return False
    sim.commit(result.client, result.state, sim.env.now)
    if not sim.still_online(round_, result.client):
        return False
    return (yield from _upload(sim, round_, result, arrived))


def caw_clients(
    sim: Simulation,
    round_: int,
    payloads: dict[int, Payload | None],
    arrived: list[Upload],
    jobs: dict[int, simpy.Process] | None = None,
) -> Process:
    """Send ``payloads`` down, run their clients' jobs, and let each client download, compute
    and upload (its uploads go to ``arrived``), one process per client (a chain of
    callbacks where none can fail or wait, :mod:`~mecsim.protocols.chained_clients`);
    return how many failed. ``jobs``, if given, gets each client's process (alive while
    it works)."""
    deliveries = sim.downlink_transfers(round_, payloads)
    results = sim.execute(round_, payloads)
    clients = list(payloads)
    if jobs is None and chainable(sim, deliveries, clients):
        return (yield from chained_clients(sim, round_, clients, deliveries, results, arrived))
    procs = [
        sim.env.process(_caw_client(sim, round_, deliveries.get(c), results[c], arrived))
        for c in payloads
    ]
    if jobs is not None:
        jobs.update(zip(payloads, procs, strict=True))
    yield sim.env.all_of(procs)
    return _failed(procs)


def _failed(processes: Sequence[simpy.Process]) -> int:
    """How many client processes have ended with a failure (returned False)."""
    return sum(1 for p in processes if not p.is_alive and p.value is False)


def _aggregate(sim: Simulation, round_: int, arrived: list[Upload]) -> Process:
    if arrived:
        arrived.sort(key=lambda u: u.client)  # order-independent floating-point sums
        yield from sim.aggregate(round_, arrived)


@register_protocol(
    "compute_and_wait",
    ComputeAndWaitSettings,
    "synchronous rounds: download, compute all tasks, upload, wait",
)
def compute_and_wait(sim: Simulation) -> Process:
    """Server process of synchronous compute-and-wait rounds."""
    env = sim.env
    for round_ in range(sim.protocol.rounds):
        round_start = env.now
        yield from sim.wait_for_online()
        selected = sim.select(round_)
        payloads = yield from _prepare(sim, round_, selected)
        arrived: list[Upload] = []
        failed = 0
        down = bulk_downlink(sim, selected, payloads)
        if down is not None:  # every client alike: in bulk, same tables (nothing can fail)
            with paused_gc():  # a job and a result per client, and no cycles
                results = sim.execute(round_, payloads)
            yield from compute_and_wait_clients(sim, round_, down, results, arrived)
        else:
            failed = yield from caw_clients(sim, round_, payloads, arrived)
        yield from _aggregate(sim, round_, arrived)
        sim.end_round(round_, round_start, selected, failed=failed)


@dataclass(frozen=True)
class _Window:
    """An open personalized-training window: when it opened, and the payload of that round.

    The deferred tasks run when the window closes, with the payload the
    client received when it opened: exactly the inputs they would have had
    had they run at once (Ditto's lambda term reads the global model).
    """

    round: int
    start: float
    payload: Payload | None


@dataclass
class _Windows:
    """Open personalized-training windows (budget ``window``), by client."""

    open: dict[int, _Window] = field(default_factory=dict)


def _split_tasks(sim: Simulation, round_: int) -> tuple[tuple[Task, ...], tuple[Task, ...]]:
    """(the round's tasks up to and including the upload, tasks after it)."""
    cut = uploading_task_index(sim, round_) + 1
    tasks = sim.tasks(round_)
    return tasks[:cut], tasks[cut:]


def _step_cap(sim: Simulation, client: int, task: Task) -> int | None:
    """Most steps ``task`` may take in one window: ``max_personal_steps``, else (budget
    ``window``) the task's own schedule, E_p epochs of the client's data."""
    p = sim.protocol
    if p.max_personal_steps is not None:
        return p.max_personal_steps
    if p.personal_budget == "window_uncapped":
        return None
    return schedule_of(sim.algorithm, task).num_steps(len(sim.indices[client][task.split]))


def _close_windows(sim: Simulation, windows: _Windows, closes: dict[int, float]) -> None:
    """Run the personalized work of windows that close at the given times (window budgets)."""
    steps: dict[int, dict[str, int]] = {}
    for client, end in closes.items():
        if client not in windows.open:
            continue
        window = windows.open[client]
        late = _split_tasks(sim, window.round)[1]
        per_task: dict[str, int] = {}
        remaining = end - window.start
        for task in late:
            seconds = sim.step_seconds(client, window.round, task, window.payload)
            n = int(remaining // seconds)
            cap = _step_cap(sim, client, task)
            n = min(n, cap) if cap is not None else n
            per_task[task.name] = n
            remaining -= n * seconds
        steps[client] = per_task
    # one job per (round, tasks with steps): a task with zero steps is not run at all
    groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for client, per_task in steps.items():
        names = tuple(name for name, n in per_task.items() if n > 0)
        if names:
            groups.setdefault((windows.open[client].round, names), []).append(client)
    for (round_, names), clients in sorted(groups.items()):
        payloads = {c: windows.open[c].payload for c in clients}
        results = sim.execute(round_, payloads, tasks=names, steps=steps)
        for client, result in results.items():
            start = windows.open[client].start
            for task in _split_tasks(sim, round_)[1]:
                if task.name in result.task_flops:
                    start = sim.record_compute(
                        round_, client, task, result.task_flops[task.name], start
                    )
            sim.commit(client, result.state, start)
    for client in steps:
        del windows.open[client]


def _wf_client(
    sim: Simulation,
    round_: int,
    delivery: Delivery | None,
    payload: Payload | None,
    result: JobResult,
    early: tuple[Task, ...],
    late: tuple[Task, ...],
    windows: _Windows | None,
    arrived: list[Upload],
    personal: list[simpy.Process],
) -> Process:
    """Download, the tasks up to the upload, then upload while the personalized tasks run;
    returns False if the client failed (as :func:`_caw_client`)."""
    client = result.client
    if not (yield from sim.download(round_, delivery)):
        return False
    if not sim.still_online(round_, client):
        return False
    if not (yield from sim.compute_tasks(round_, result, early)):
        return False
    ready = sim.env.now
    if windows is not None:
        windows.open[client] = _Window(round_, ready, payload)
    else:  # the personal tasks start now and run back to back
        personal.append(sim.env.process(sim.compute_tasks(round_, result, late, can_fail=False)))
        flops = [result.task_flops[t.name] for t in late if t.name in result.task_flops]
        ready += sum(sim.compute_seconds(client, f) for f in flops)
    sim.commit(client, result.state, ready)
    if not sim.still_online(round_, client):
        return False
    return (yield from _upload(sim, round_, result, arrived))


@register_protocol(
    "wait_free",
    WaitFreeSettings,
    "upload after the generic task; personalized training in the window",
)
def wait_free(sim: Simulation) -> Process:
    """Server process of wait-free rounds (see the module docstring)."""
    env, p = sim.env, sim.protocol
    windows = _Windows() if p.personal_budget != "epochs" else None
    personal: list[simpy.Process] = []
    everyone = sim.trainers
    pending: Callable[[], None] | None = None  # the last round's end_round, once its windows close
    for round_ in range(p.rounds):
        round_start = env.now
        early, late = _split_tasks(sim, round_)
        early_names = tuple(t.name for t in early) if windows is not None else None
        yield from sim.wait_for_online()
        selected = sim.select(round_)
        receivers = list(everyone) if p.broadcast_unselected else selected
        payloads, deliveries = yield from _start_round(sim, round_, receivers)
        if windows is not None:  # a window closes when the client's next model has arrived
            _close_windows(sim, windows, _arrivals(deliveries, receivers, round_start))
        if pending is not None:  # no simulated time has passed since that round's aggregation
            pending()
            pending = None
        results = sim.execute(round_, {c: payloads[c] for c in selected}, tasks=early_names)
        arrived: list[Upload] = []
        procs = [
            env.process(
                _wf_client(
                    sim,
                    round_,
                    deliveries.get(c),
                    payloads[c],
                    results[c],
                    early,
                    late,
                    windows,
                    arrived,
                    personal,
                )
            )
            for c in selected
        ]
        unselected = [  # appendix F (a): unselected clients get the model
            env.process(_receive(sim, round_, c, deliveries.get(c), payloads[c], windows))
            for c in set(receivers) - set(selected)
        ]
        yield env.all_of(procs + unselected)
        yield from _aggregate(sim, round_, arrived)
        end = functools.partial(sim.end_round, round_, round_start, selected, failed=_failed(procs))
        if windows is None:
            end()
        else:  # evaluate once the round's windows have closed (t_personal: when they did)
            pending = end
    if pending is not None:  # the last windows close when the run ends
        _close_windows(sim, windows, dict.fromkeys(list(windows.open), env.now))
        pending()
    yield env.all_of(personal)  # record the last personalized tasks (epochs budget)


def _arrivals(
    deliveries: dict[int, Delivery], receivers: Sequence[int], now: float
) -> dict[int, float]:
    """When each receiver's model arrives: its delivery's predicted end (the round's
    downlink is the only traffic on the server's radio until then); a predicted
    failure leaves the client's window open."""
    out = {}
    for c in receivers:
        delivery = deliveries.get(c)
        if delivery is None:
            out[c] = now
        elif not delivery.predicted_failure:
            out[c] = delivery.predicted_end
    return out


def _receive(
    sim: Simulation,
    round_: int,
    client: int,
    delivery: Delivery | None,
    payload,
    windows: _Windows | None,
) -> Process:
    """An unselected client receives the broadcast and (window budget) opens a new window."""
    if not (yield from sim.download(round_, delivery)):
        return
    if payload is not None:
        state = sim.client_states[client]
        sim.algorithm.receive(state, payload, sim.context(round_, client))
        sim.commit(client, state, max(sim.state_ready[client], sim.env.now))
        if windows is not None:
            windows.open[client] = _Window(round_, sim.env.now, payload)


@register_protocol(
    "deadline", DeadlineSettings, "semi-synchronous: aggregate what arrived by the round deadline"
)
def deadline(sim: Simulation) -> Process:
    """Server process of deadline rounds (see the module docstring)."""
    env, p = sim.env, sim.protocol
    busy: set[int] = set()
    carried: list[Upload] = []
    for round_ in range(p.rounds):
        round_start = env.now
        sim.network.due = round_start + p.deadline_s
        idle = [c for c in sim.trainers if c not in busy]
        selected = sim.select(round_, idle) if idle else []
        payloads, deliveries = yield from _start_round(sim, round_, selected)
        results = sim.execute(round_, payloads)
        arrived: list[Upload] = []
        procs = [
            env.process(_deadline_client(sim, round_, deliveries.get(c), results[c], arrived, busy))
            for c in selected
        ]
        busy.update(selected)
        yield (
            env.any_of([env.all_of(procs), env.timeout(p.deadline_s)])
            if procs
            else env.timeout(p.deadline_s)
        )
        on_time = list(arrived)
        # a client still at work is late; one whose process ended without arriving failed
        late = [(proc, c) for proc, c in zip(procs, selected, strict=True) if proc.is_alive]
        failed = _failed(procs)
        if p.late == "carry":
            for proc, c in late:
                proc.callbacks.append(
                    lambda _, a=arrived, c=c: carried.extend(u for u in a if u.client == c)
                )
        uploads, carried[:] = carried + on_time, []
        yield from _aggregate(sim, round_, uploads)
        sim.end_round(
            round_,
            round_start,
            selected,
            on_time=len(on_time),
            late=len(late),
            failed=failed,
        )


def _deadline_client(
    sim: Simulation,
    round_: int,
    delivery: Delivery | None,
    result: JobResult,
    arrived: list[Upload],
    busy: set[int],
) -> Process:
    ok = yield from _caw_client(sim, round_, delivery, result, arrived)
    busy.discard(result.client)
    return ok
