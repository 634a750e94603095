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
  ``S`` constant (1), polynomial ``(s + 1)^-polynomial_a``, or hinge (1 if
  ``s <= hinge_b``, else ``1 / (hinge_a (s - hinge_b) + 1)``). With ``rho > 0``
  the client's uploading task minimizes ``f(w) + rho/2 ||w - w_v||^2`` (the
  paper's regularized local objective; see :class:`TrainingContext`).
* FedBuff (Nguyen et al. 2022): each client uploads its model; the server
  takes its *delta* ``d_i = w_i - w_v`` from the model it downloaded, buffers
  it, and every ``buffer_size`` (K) arrivals applies
  ``w <- w + server_lr * (1/K) sum_i (1 + s_i)^-staleness_exponent d_i`` to the
  *current* model (s_i: updates since the client downloaded). The update is a
  timed server computation of ``3 sum_i |d_i| + |w|`` FLOPs (subtract, scale,
  accumulate per delta; one add to the model).

Both update the server through the algorithm's ``mix`` hook, so they apply to
algorithms whose upload is a model the client downloaded and trained (FedAvg,
FedProx and the PFL+ algorithms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import simpy
import torch
from pydantic import Field

from mecsim.algorithms.aggregate import payload_difference
from mecsim.algorithms.base import SERVER, Upload
from mecsim.common.errors import ConfigError
from mecsim.engine.simulation import Process, Simulation
from mecsim.learning.state import Payload
from mecsim.protocols.registry import register_protocol, uploading_task_index
from mecsim.protocols.settings import ProtocolSettings


class AsyncSettings(ProtocolSettings):
    """Keys every asynchronous protocol shares."""

    concurrency: int | None = Field(
        default=None, ge=1, description="clients training at once (default: clients per round)"
    )


class FedAsyncSettings(AsyncSettings):
    """fedasync: mixing weight, staleness function and local proximal term (Xie et al. 2019)."""

    kind: Literal["fedasync"] = "fedasync"
    mixing: float = Field(default=0.6, gt=0, le=1, description="base mixing weight alpha")
    staleness: Literal["constant", "polynomial", "hinge"] = Field(
        default="polynomial", description="staleness function S(s)"
    )
    polynomial_a: float = Field(default=0.5, ge=0, description="polynomial: S = (s + 1)^-a")
    hinge_a: float = Field(default=10.0, ge=0, description="hinge: slope a past b")
    hinge_b: float = Field(default=4.0, ge=0, description="hinge: staleness b at full weight")
    rho: float = Field(
        default=0.0, ge=0, description="local proximal term rho/2 ||w - w_v||^2 (0: none)"
    )

    @property
    def local_proximal(self) -> float:
        return self.rho


class FedBuffSettings(AsyncSettings):
    """fedbuff: buffer size K, server learning rate, staleness weight (Nguyen et al. 2022)."""

    kind: Literal["fedbuff"] = "fedbuff"
    buffer_size: int = Field(default=10, ge=1, description="arrivals per aggregation (K)")
    server_lr: float = Field(default=1.0, gt=0, description="server learning rate eta_g")
    staleness_exponent: float = Field(
        default=0.5, ge=0, description="delta weight (1 + s)^-exponent (0.5: 1/sqrt(1 + s))"
    )


def staleness_weight(staleness: int, protocol: FedAsyncSettings) -> float:
    """S(s): FedAsync's staleness function (constant, polynomial or hinge)."""
    if protocol.staleness == "constant":
        return 1.0
    if protocol.staleness == "polynomial":
        return (staleness + 1) ** -protocol.polynomial_a
    a, b = protocol.hinge_a, protocol.hinge_b
    return 1.0 if staleness <= b else 1.0 / (a * (staleness - b) + 1.0)


@dataclass(frozen=True)
class Arrival:
    """An upload that reached the server."""

    upload: Upload
    sent: Payload | None
    """What the client downloaded (model version ``version``)."""
    version: int
    arrived_at: float
    job: int


class _AsyncServer:
    """State shared by the server process and the client processes."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.version = 0
        self.jobs = 0
        self.idle = set(sim.trainers)
        self.inbox = simpy.Store(sim.env)
        self.failed = 0
        """Jobs that ended without their upload arriving since the last server update."""

    def start_next(self) -> None:
        """Start one idle client (uniformly chosen) on the current global model; if every
        idle client is offline, start one when the first comes online."""
        if not self.idle:
            return
        chosen = self.sim.select(self.jobs, sorted(self.idle), k=1)
        if not chosen:
            self.sim.env.process(self._start_when_online())
            return
        (client,) = chosen
        self.idle.discard(client)
        self.sim.env.process(self._client(client, self.jobs))
        self.jobs += 1

    def _start_when_online(self) -> Process:
        """Fill a concurrency slot when an idle client comes online (never: the slot stays
        empty; a run left with none stops with an error, see :meth:`Simulation.run`)."""
        t = self.sim.faults.next_online(sorted(self.idle), self.sim.env.now)
        if math.isinf(t):
            return
        yield self.sim.env.timeout(t - self.sim.env.now)
        self.start_next()

    def _client(self, client: int, job: int) -> Process:
        """One job: its events carry ``job`` and, as ``round``, the update it started under."""
        sim = self.sim
        version = self.version
        payload = sim.payload(job, client)
        # clients that start together on the same model share one broadcast
        join = ("version", version) if sim.algorithm.broadcast else None
        delivery = sim.downlink_transfers(
            version, {client: payload}, key=("job", job), join=join
        ).get(client)
        result = sim.execute(job, {client: payload})[client]
        if (
            (yield from sim.download(version, delivery, job))
            and sim.still_online(version, client, job)
            and (yield from sim.compute_tasks(version, result, sim.tasks(job), job))
        ):
            sim.commit(client, result.state, sim.env.now)
            upload = result.upload
            if (
                upload is not None
                and sim.still_online(version, client, job)
                and (yield from sim.upload(version, client, upload, job))
            ):
                arrival = Upload(client, upload, sim.num_samples[client])
                yield self.inbox.put(Arrival(arrival, payload, version, sim.env.now, job))
            elif upload is not None:
                self.failed += 1
        else:
            self.failed += 1
        self.idle.add(client)
        self.start_next()


def buffered_update(
    current: Payload, buffer: list[Arrival], version: int, p: FedBuffSettings
) -> tuple[Payload, int]:
    """FedBuff's new model and its FLOPs: ``w + server_lr/K sum_i (1 + s_i)^-e (w_i - w_v_i)``.

    Sums run in float64 in job order, so the result does not depend on
    arrival order within the buffer; integer buffers keep their current values.
    """
    total: dict[str, torch.Tensor] = {}
    flops = 0
    for arrival in sorted(buffer, key=lambda a: a.job):
        sent = arrival.sent or {}
        missing = [k for k in arrival.upload.payload if k not in sent]
        if missing:
            raise ConfigError(
                "protocol.kind",
                f"fedbuff applies deltas from the downloaded model, but the upload holds "
                f"{missing[0]!r}, which the client never downloaded; use fedasync",
            )
        scale = p.server_lr * (1 + version - arrival.version) ** -p.staleness_exponent
        scale /= len(buffer)
        for key, delta in payload_difference(arrival.upload.payload, sent).items():
            term = scale * delta.to(torch.float64)
            total[key] = total[key] + term if key in total else term
            flops += 3 * delta.numel()  # subtract, scale, accumulate
    new = dict(current)
    for key, step in total.items():
        new[key] = (current[key].to(torch.float64) + step).to(current[key].dtype)
        flops += current[key].numel()
    return new, flops


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
            current = sim.algorithm.downlink(sim.server_state, sim.context(update, None))
            new, flops = buffered_update(current or {}, buffer, server.version, p)
            yield from sim.mix(update, Upload(SERVER, new, 0), 1.0, flops=flops, count=len(buffer))
            extra = {
                "buffered": len(buffer),
                "max_staleness": max(server.version - a.version for a in buffer),
            }
            buffer = []
        else:
            weight = p.mixing * staleness_weight(staleness, p)
            yield from sim.mix(update, arrival.upload, weight)
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
            failed=server.failed,
            **extra,
        )
        server.failed = 0
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
