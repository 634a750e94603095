"""The simulator's computation: clients' tasks on their devices and their rows.

A mix-in of :class:`~mecsim.engine.simulation.Simulation` (it uses the simulation's
clock, clients, recorder and fault model): a task's duration is its metered
FLOPs over the device's FLOP/s, cut short where a fault takes the client away.
"""

from __future__ import annotations

from collections.abc import Sequence

from mecsim.algorithms.base import (
    Task,
    schedule_of,
    start_of,
)
from mecsim.engine.faults import Drop
from mecsim.engine.process import Process
from mecsim.executors import ClientJob, JobResult
from mecsim.executors.base import job_context, step_flops
from mecsim.learning.cost import compute_cost
from mecsim.learning.state import Payload


class Computing:
    """Client computation of a :class:`~mecsim.engine.simulation.Simulation` (a mix-in)."""

    def compute(
        self, round_: int, client: int, task: Task, flops: int, job: int | None = None
    ) -> Process:
        """Client runs one task: duration = metered FLOPs / device FLOP/s.

        A client computes one task at a time: the task starts when the
        client's previous computation has finished (wait-free training can
        still be busy with the personalized task when the next model arrives).
        """
        if self.busy_until[client] > self.env.now:
            yield self.env.timeout(self.busy_until[client] - self.env.now)
        start = self.env.now
        seconds, energy = self.occupy(client, flops, start)
        phase = f"compute:{task.name}"
        token = self._begin(
            lambda: self._record_cut_compute(round_, client, phase, flops, seconds, start, job)
        )
        yield self.env.timeout(seconds)
        self._end(token)
        self.computed(round_, client, phase, start, seconds, flops, energy, job)

    def computed(
        self,
        round_: int,
        client: int,
        phase: str,
        start: float,
        seconds: float,
        flops: int,
        energy_j: float,
        job: int | None = None,
    ) -> None:
        """Record a computation of ``seconds`` from ``start`` that ends now."""
        self.recorder.event(
            round_,
            client,
            phase,
            start,
            self.env.now,
            duration_s=seconds,
            job=job,
            flops=flops,
            energy_j=energy_j,
        )

    def _record_cut_compute(
        self,
        round_: int,
        client: int,
        phase: str,
        flops: int,
        seconds: float,
        start: float,
        job: int | None,
    ) -> None:
        """A computation still running when the run ends: the part done by now (FLOPs in
        proportion to the time, as a dropout's partial task)."""
        elapsed = self.env.now - start
        done = int(flops * elapsed / seconds) if seconds > 0 else 0
        self.recorder.event(
            round_,
            client,
            f"{phase}:cutoff",
            start,
            self.env.now,
            duration_s=elapsed,
            job=job,
            flops=done,
            energy_j=self.clients[client].device.compute_energy(elapsed),
        )

    def compute_tasks(
        self,
        round_: int,
        result: JobResult,
        tasks: Sequence[Task],
        job: int | None = None,
        can_fail: bool = True,
    ) -> Process:
        """Client runs ``tasks`` of a finished job one after another (those the job ran);
        returns False if the client dropped out (see :mod:`mecsim.engine.faults`)."""
        client = result.client
        run = [t for t in tasks if t.name in result.task_flops]
        drop = None
        if can_fail and self.faults is not None and run:
            if self.busy_until[client] > self.env.now:
                yield self.env.timeout(self.busy_until[client] - self.env.now)
            seconds = [self.compute_seconds(client, result.task_flops[t.name]) for t in run]
            key = round_ if job is None else job
            drop = self.faults.plan(client, key, seconds, self.env.now)
        for i, task in enumerate(run):
            flops = result.task_flops[task.name]
            if drop is not None and drop.task == i:
                yield from self._interrupted(round_, client, task, flops, drop, job)
                return False
            yield from self.compute(round_, client, task, flops, job)
        return True

    def _interrupted(
        self, round_: int, client: int, task: Task, flops: int, drop: Drop, job: int | None
    ) -> Process:
        """The part of ``task`` done before the client dropped, then the fault event."""
        seconds = self.compute_seconds(client, flops)
        done = int(flops * drop.seconds / seconds) if seconds > 0 else 0
        yield from self.compute(round_, client, task, done, job)
        self.recorder.event(
            round_, client, f"fault:{drop.cause}", self.env.now, self.env.now, job=job
        )

    def occupy(self, client: int, flops: int, start: float) -> tuple[float, float]:
        """Book ``client``'s device for ``flops`` from ``start``; return (seconds, joules)."""
        seconds, energy = compute_cost(flops, self.clients[client].device)
        self.busy_until[client] = max(self.busy_until[client], start + seconds)
        return seconds, energy

    def record_compute(
        self, round_: int, client: int, task: Task, flops: int, start: float
    ) -> float:
        """Log a computation that ran (or runs) from ``start`` without a process; return its end.

        Used for wait-free windows, whose size is fixed only when they close.
        """
        seconds, energy = self.occupy(client, flops, start)
        end = start + seconds
        self.recorder.event(
            round_,
            client,
            f"compute:{task.name}",
            start,
            end,
            duration_s=seconds,
            flops=flops,
            energy_j=energy,
        )
        return end

    def step_seconds(self, client: int, round_: int, task: Task, payload: Payload | None) -> float:
        """Simulated seconds of one SGD step of ``task`` on ``client``'s device.

        The step is metered like any other (see :class:`~mecsim.learning.cost.StepMeter`),
        from the state and payload the task would start from.
        """
        assert self.training is not None, "step_seconds needs the run's TrainingContext"
        algorithm = self.algorithm
        state = self.client_states[client]
        job = ClientJob(client, round_, state, payload, self.indices[client])
        ctx = job_context(job, self.seed)
        start = start_of(algorithm, task, state, payload, ctx)
        consts = self.training.constants(task, state, start, payload, ctx)
        schedule = schedule_of(algorithm, task)
        flops = step_flops(self.training, client, task, schedule, start, consts, job.indices)
        return flops / self.clients[client].device.flops_per_s

    def compute_seconds(self, client: int, flops: int) -> float:
        """Simulated seconds ``client``'s device takes for ``flops``."""
        return compute_cost(flops, self.clients[client].device)[0]
