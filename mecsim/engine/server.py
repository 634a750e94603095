"""The server's work on the clock: aggregation (at the server or an edge server),
asynchronous mixing, server tasks, and their rows.

A mix-in of :class:`~mecsim.engine.simulation.Simulation` (it uses the simulation's
clock, algorithm, server state, executor and recorder).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Generator
from typing import Any

import simpy

from mecsim.algorithms.base import SERVER, ServerState, Upload
from mecsim.common.errors import ConfigError
from mecsim.engine.process import Process
from mecsim.executors import ClientJob
from mecsim.learning.cost import compute_cost
from mecsim.learning.devices import DeviceProfile


class ServerWork:
    """Server-side computation of a :class:`~mecsim.engine.simulation.Simulation` (a mix-in)."""

    def aggregate(
        self, round_: int, uploads: list[Upload], phase: str = "aggregate", counted: bool = True
    ) -> Process:
        """Server aggregates (FLOPs / server FLOP/s), then runs its server tasks, if any.
        ``counted``: the uploads are client updates (the rounds table's ``updates``)."""
        flops = self.algorithm.aggregation_flops(self.server_state, uploads)
        self._updates += len(uploads) if counted else 0
        yield from self._server_compute(round_, phase, flops)
        self.server_state = self.algorithm.aggregate(
            self.server_state, uploads, self.context(round_, SERVER)
        )
        yield from self.server_work(round_)

    def aggregate_at(
        self,
        round_: int,
        state: ServerState,
        uploads: list[Upload],
        at: tuple[DeviceProfile, int],
    ) -> Generator[simpy.Event, Any, ServerState]:
        """An edge server's aggregation of ``state`` with ``uploads``, on its ``(device,
        cell)``; returns the new state (the server's own state is not touched, so edges
        aggregate at the same time). The caller counts the updates (``end_round``)."""
        flops = self.algorithm.aggregation_flops(state, uploads)
        new = self.algorithm.aggregate(state, uploads, self.context(round_, SERVER))
        yield from self._server_compute(round_, "aggregate", flops, at)
        return new

    def mix(
        self,
        round_: int,
        upload: Upload,
        weight: float,
        flops: int | None = None,
        count: int = 1,
    ) -> Process:
        """Asynchronous server update through the algorithm's ``mix`` hook, timed like aggregate.

        ``flops`` defaults to averaging the upload with the current values of
        the same entries (two payloads of the upload's size); ``count`` is the
        number of client updates it applies (a FedBuff buffer's size).
        """
        self._updates += count
        if flops is None:
            flops = self.algorithm.aggregation_flops(self.server_state, [upload, upload])
        yield from self._server_compute(round_, "aggregate", flops)
        self.server_state = self.algorithm.mix(
            self.server_state, upload, weight, self.context(round_, SERVER)
        )
        yield from self.server_work(round_)

    def server_work(self, round_: int) -> Process:
        """Run the algorithm's server tasks on the server state, timed on the server device."""
        tasks = self.algorithm.server_tasks(round_)
        if not tasks:
            return
        public = self.indices[0].get("public") if self.indices else None
        job = ClientJob(
            SERVER,
            round_,
            self.server_state,
            None,
            {} if public is None else {"public": public},
            server=True,
        )
        started = time.perf_counter()
        (result,) = self.executor.run([job])
        self.ledger.add_result(result)
        self._train_wall_s += time.perf_counter() - started
        self.server_state = result.state
        for task in tasks:
            if task.name in result.task_flops:
                flops = result.task_flops[task.name]
                yield from self._server_compute(round_, f"server:{task.name}", flops)

    def _server_compute(
        self, round_: int, phase: str, flops: int, at: tuple[DeviceProfile, int] | None = None
    ) -> Process:
        """The server device (``at``: an edge server's device, in its cell) computes
        ``flops`` FLOPs now; the event is recorded when done."""
        real = isinstance(flops, numbers.Real) and not isinstance(flops, bool)
        if not (real and math.isfinite(flops) and flops >= 0):
            raise ConfigError(
                "algorithm.name",
                f"algorithm {type(self.algorithm).__name__} counted {flops!r} FLOPs for its "
                f"{phase!r} step (aggregation_flops or a server task): return a finite "
                "count >= 0",
            )
        device, cell = (self.server_device, None) if at is None else at
        seconds, energy = compute_cost(flops, device)
        start = self.env.now
        yield self.env.timeout(seconds)
        self.server_ready = self.env.now
        self.recorder.event(
            round_,
            SERVER,
            phase,
            start,
            self.env.now,
            duration_s=seconds,
            flops=flops,
            energy_j=energy,
            cell=cell,
        )
