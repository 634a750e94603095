"""Asynchronous protocols driven by the event clock: FedAsync and FedBuff.

Up to ``concurrency`` clients train at once. A client starts by downloading
the *current* global model (version v), runs all of its tasks, and uploads;
its start, finish and arrival times come from the cost model at the moment
it starts, never from knowing the future. The server handles arrivals one at
a time, in arrival order; one "round" of the rounds table is one server
update. When a client's upload has arrived, the next client (chosen
uniformly among idle clients from the selection stream) starts.

* FedAsync (Xie et al. 2019): on each arrival, ``w <- (1 - a) w + a w_i`` with
  ``a = mixing * S(staleness)``, staleness = updates since version v, and
  ``S`` constant (1), polynomial ``(s + 1)^-a``, or hinge (1 if s <= b else
  ``1 / (a (s - b) + 1)``).
* FedBuff (Nguyen et al. 2022): arrivals are buffered; every ``buffer_size``
  arrivals the server averages them (weighted by samples) and moves the
  global model toward that average with ``server_lr``.

Both mix through the algorithm's own ``aggregate`` with explicit weights, so
they apply to algorithms whose upload is a full model (FedAvg, FedProx and
the PFL+ algorithms).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import simpy
from pydantic import Field

from mecsim.algorithms.base import SERVER, Upload
from mecsim.protocols.registry import register_protocol, uploading_task_index
from mecsim.protocols.settings import ProtocolSettings
from mecsim.simulation import Process, Simulation


class AsyncSettings(ProtocolSettings):
    """Keys every asynchronous protocol shares."""

    concurrency: int | None = Field(
        default=None, ge=1, description="clients training at once (default: clients per round)"
    )


class FedAsyncSettings(AsyncSettings):
    """fedasync: mixing weight and staleness function (Xie et al. 2019)."""

    kind: Literal["fedasync"] = "fedasync"
    mixing: float = Field(default=0.6, gt=0, le=1, description="base mixing weight alpha")
    staleness: Literal["constant", "polynomial", "hinge"] = Field(
        default="polynomial", description="staleness function S(s)"
    )
    staleness_a: float = Field(default=0.5, ge=0, description="polynomial exponent / hinge slope")
    staleness_b: float = Field(default=4.0, ge=0, description="hinge: staleness at full weight")


class FedBuffSettings(AsyncSettings):
    """fedbuff: buffer size K and server learning rate (Nguyen et al. 2022)."""

    kind: Literal["fedbuff"] = "fedbuff"
    buffer_size: int = Field(default=10, ge=1, description="arrivals per aggregation (K)")
    server_lr: float = Field(default=1.0, gt=0, description="server learning rate")


def staleness_weight(staleness: int, protocol: FedAsyncSettings) -> float:
    """S(s): FedAsync's staleness function (constant, polynomial or hinge)."""
    a, b = protocol.staleness_a, protocol.staleness_b
    if protocol.staleness == "constant":
        return 1.0
    if protocol.staleness == "polynomial":
        return (staleness + 1) ** -a
    return 1.0 if staleness <= b else 1.0 / (a * (staleness - b) + 1.0)


@dataclass(frozen=True)
class Arrival:
    """An upload that reached the server."""

    upload: Upload
    version: int
    arrived_at: float
    job: int


class _AsyncServer:
    """State shared by the server process and the client processes."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.version = 0
        self.jobs = 0
        self.idle = set(range(len(sim.clients)))
        self.inbox = simpy.Store(sim.env)

    def start_next(self) -> None:
        """Start one idle client (uniformly chosen) on the current global model."""
        if not self.idle:
            return
        (client,) = self.sim.select(self.jobs, sorted(self.idle), k=1)
        self.idle.discard(client)
        self.sim.env.process(self._client(client, self.jobs))
        self.jobs += 1

    def _client(self, client: int, job: int) -> Process:
        sim = self.sim
        version = self.version
        payload = sim.algorithm.downlink(sim.server_state, sim.context(job, client))
        transfer = sim.downlink_transfers(job, {client: payload})[client]
        result = sim.execute(job, {client: payload})[client]
        yield from sim.download(job, transfer)
        yield from sim.compute_tasks(job, result, sim.tasks(job))
        sim.client_states[client] = result.state
        if result.upload is not None:
            yield from sim.upload(job, client, result.upload)
            upload = Upload(client, result.upload, sim.num_samples[client])
            yield self.inbox.put(Arrival(upload, version, sim.env.now, job))
        self.idle.add(client)
        self.start_next()

    def mix(self, update: int, upload: Upload, weight: float) -> Process:
        """``w <- (1 - weight) w + weight * upload`` through the algorithm's ``mix`` hook."""
        yield from self.sim.mix(update, upload, weight)


def _run(sim: Simulation, buffered: bool) -> Process:
    p = sim.protocol
    uploading_task_index(sim)  # an algorithm that never uploads would never update the server
    server = _AsyncServer(sim)
    for _ in range(p.concurrency or sim.clients_per_round):
        server.start_next()
    buffer: list[Arrival] = []
    update = 0
    start = sim.env.now  # a round (server update) starts where the previous one ended
    while update < p.rounds:
        arrival: Arrival = yield server.inbox.get()
        staleness = server.version - arrival.version
        if buffered:
            buffer.append(arrival)
            if len(buffer) < p.buffer_size:
                continue
            uploads = sorted((a.upload for a in buffer), key=lambda u: u.client)
            ctx = sim.context(update, SERVER)
            average = sim.algorithm.aggregate(sim.server_state, uploads, ctx)
            pseudo = Upload(SERVER, sim.algorithm.downlink(average, sim.context(update, None)), 0)
            yield from server.mix(update, pseudo, p.server_lr)
            extra = {
                "buffered": len(buffer),
                "max_staleness": max(server.version - a.version for a in buffer),
            }
            buffer = []
        else:
            weight = p.mixing * staleness_weight(staleness, p)
            yield from server.mix(update, arrival.upload, weight)
            extra = {"weight": weight}
        server.version += 1
        sim.end_round(
            update,
            start,
            [arrival.upload.client],
            applied_client=arrival.upload.client,
            staleness=staleness,
            arrived_at=arrival.arrived_at,
            job=arrival.job,
            **extra,
        )
        update += 1
        start = sim.env.now


@register_protocol(
    "fedasync",
    FedAsyncSettings,
    "asynchronous: mix each arrival with staleness weight (FedAsync)",
)
def fedasync(sim: Simulation) -> Process:
    """Server process of FedAsync."""
    yield from _run(sim, buffered=False)


@register_protocol("fedbuff", FedBuffSettings, "asynchronous: aggregate every K arrivals (FedBuff)")
def fedbuff(sim: Simulation) -> Process:
    """Server process of FedBuff."""
    yield from _run(sim, buffered=True)
