"""Compute-and-wait clients as chains of callbacks: no SimPy process per client.

Each selected client of a compute-and-wait round downloads, runs its tasks and uploads
(:func:`~mecsim.protocols.synchronous.caw_clients`, one process per client). Where
nothing in the round can fail or wait (no fault model, no job handles asked for, a
:meth:`~mecsim.net.network.Network.unhindered` network, a delivery for every client,
every client idle), the same steps are a chain of callbacks: on the download's end
event, on a timeout at each task's end, on the upload's end event. Each link schedules
what the client's process would schedule, at the same point of the same step, in SimPy's
own queue, so events that tie in time keep their order and the tables are the process
path's byte for byte (``tests/protocols/test_chained_clients.py``). The radio, the handover
recorder and the server stay SimPy processes and callbacks, interleaved as before;
what the chain saves is each client's process, its start and end events and the
generator frames every step resumes through. Nothing of a compute-and-wait round is
under way when the server resumes, so, as in the bulk path, no cut-off records are kept
(the processes' never fire). ``execution.bulk_rounds = false`` turns it off with the
other bulk paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import simpy

from mecsim.algorithms.base import Task, Upload
from mecsim.engine.simulation import Process, Simulation
from mecsim.executors import JobResult
from mecsim.learning.state import Payload, by_identity, payload_nbytes
from mecsim.net.network import upload_key
from mecsim.net.radio import Delivery


def chainable(sim: Simulation, deliveries: dict[int, Delivery], clients: Sequence[int]) -> bool:
    """Whether a round of ``clients`` with these ``deliveries`` may run as chains (each idle
    now, so no task of theirs waits for the device as :meth:`Computing.compute` would)."""
    now = sim.env.now
    return (sim.bulk_rounds and sim.faults is None and sim.network.unhindered()
            and all(c in deliveries and sim.busy_until[c] <= now for c in clients))  # fmt: skip


def chained_clients(
    sim: Simulation,
    round_: int,
    clients: Sequence[int],
    deliveries: dict[int, Delivery],
    results: dict[int, JobResult],
    arrived: list[Upload],
) -> Process:
    """Each of ``clients`` downloads, computes and uploads as a chain (its uploads go to
    ``arrived``); returns when the last has finished, as the processes' ``all_of`` does
    (none fails here)."""
    done = sim.env.event()
    count = [len(clients)]
    tasks = sim.tasks(round_)
    size = by_identity(payload_nbytes)  # cost-only clients of a class share one payload
    for c in clients:  # in the order the processes would start
        _Chain(sim, round_, deliveries[c], results[c], tasks, arrived, count, done, size)
    yield done
    return 0


class _Chain:
    """One client's download -> tasks -> upload (``synchronous._caw_client``'s steps)."""

    __slots__ = ("sim", "round", "result", "nbytes", "run", "arrived", "count", "done", "size")

    def __init__(
        self,
        sim: Simulation,
        round_: int,
        delivery: Delivery,
        result: JobResult,
        tasks: Sequence[Task],
        arrived: list[Upload],
        count: list[int],
        done: simpy.Event,
        size: Callable[[Payload], int],
    ) -> None:
        self.sim, self.round, self.result, self.nbytes = sim, round_, result, delivery.nbytes
        self.size = size
        self.run = [t for t in tasks if t.name in result.task_flops]
        self.arrived, self.count, self.done = arrived, count, done
        delivery.done.callbacks.append(self._downloaded)  # type: ignore[union-attr]

    def _downloaded(self, event: simpy.Event) -> None:
        self.sim.record_download(self.round, None, event.value, self.nbytes)
        self._compute(0)

    def _compute(self, i: int) -> None:
        """Task ``i`` from now (the client is idle: its download has just ended), or the
        upload after the last."""
        if i == len(self.run):
            self._upload()
            return
        sim, client = self.sim, self.result.client
        flops = self.result.task_flops[self.run[i].name]
        start = sim.env.now
        seconds, energy = sim.occupy(client, flops, start)
        phase = f"compute:{self.run[i].name}"
        sim.env.timeout(seconds).callbacks.append(  # type: ignore[union-attr]
            lambda _: self._computed(i, phase, start, seconds, flops, energy)
        )

    def _computed(
        self, i: int, phase: str, start: float, seconds: float, flops: int, energy: float
    ) -> None:
        self.sim.computed(self.round, self.result.client, phase, start, seconds, flops, energy)
        self._compute(i + 1)

    def _upload(self) -> None:
        sim, client, payload = self.sim, self.result.client, self.result.upload
        sim.commit(client, self.result.state, sim.env.now)
        if payload is None:
            self._finish()
            return
        nbytes, key, granted = self.size(payload), upload_key(self.round, 0), sim.env.now
        sim.network.start_upload(client, nbytes, key).callbacks.append(  # type: ignore[union-attr]
            lambda event: self._uploaded(event.value, payload, nbytes, granted)
        )

    def _uploaded(self, reception: object, payload: Payload, nbytes: int, granted: float) -> None:
        sim, client = self.sim, self.result.client
        sim.record_upload(self.round, client, nbytes, granted, granted, reception, None)  # type: ignore[arg-type]
        sim.update_arrived(self.round, client)
        self.arrived.append(Upload(client, payload, sim.num_samples[client]))
        self._finish()

    def _finish(self) -> None:
        """A process's end is an event, and the last one's triggers the ``all_of``: the
        last chain's end is a zero timeout that then succeeds ``done``."""
        self.count[0] -= 1
        if self.count[0] == 0:
            done = self.done
            self.sim.env.timeout(0).callbacks.append(lambda _: done.succeed())  # type: ignore[union-attr]
