"""The simulator: one SimPy environment, timed activities, and the run's state.

Simulated time (``env.now``, seconds) advances only by cost-model durations;
wall-clock time is measured separately per round. Each protocol step is a
short process generator here (:meth:`download`, :meth:`compute`,
:meth:`upload`, :meth:`aggregate`); a protocol (``mecsim.protocols``)
composes them. Simultaneous events run in scheduling order (SimPy's heap is
keyed by time, priority and insertion id), so runs are deterministic.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from mecsim.algorithms.base import SERVER, Algorithm, ClientState, RoundContext, Task, Upload
from mecsim.cost import compute_cost, transmit_cost
from mecsim.devices import DeviceProfile
from mecsim.evaluation import Evaluation, Evaluator
from mecsim.executors import ClientJob, Executor, JobResult, TrainingContext
from mecsim.executors.base import job_context, step_flops
from mecsim.network import ClientProfile, Network, Transfer
from mecsim.recorder import Recorder
from mecsim.rng import numpy_rng
from mecsim.state import Payload, payload_nbytes

if TYPE_CHECKING:
    from mecsim.protocols.settings import ProtocolSettings

Process = Generator[simpy.Event, Any, Any]


@dataclass
class RoundTotals:
    """Bytes moved during one round (per direction, summed over clients)."""

    bytes_up: int = 0
    bytes_down: int = 0


class Simulation:
    """Owns the clock, the algorithm's state, and the record of what happened."""

    def __init__(
        self,
        *,
        algorithm: Algorithm,
        executor: Executor,
        network: Network,
        clients: Sequence[ClientProfile],
        indices: Sequence[dict[str, Any]],
        server_device: DeviceProfile,
        evaluator: Evaluator,
        protocol: ProtocolSettings,
        seed: int,
        public_nbytes: int = 0,
        training: TrainingContext | None = None,
        on_round: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.algorithm = algorithm
        self.executor = executor
        self.network = network
        self.clients = list(clients)
        self.indices = [dict(i) for i in indices]
        self.num_samples = [len(i["train"]) for i in self.indices]
        self.server_device = server_device
        self.evaluator = evaluator
        self.protocol = protocol
        self.seed = seed
        self.public_nbytes = public_nbytes
        self.training = training
        """The executors' shared context (architectures, data, FLOP meter), if any."""
        self.on_round = on_round
        self.recorder = Recorder()
        self.server_state = algorithm.init_server_state()
        self.client_states = [algorithm.init_client_state(c.id) for c in self.clients]
        self.last_evaluation: Evaluation | None = None
        self.busy_until = [0.0] * len(self.clients)
        """Per client: simulated time its current computation ends."""
        self.state_ready = [0.0] * len(self.clients)
        """Per client: simulated time the state in ``client_states`` is (or will be) complete."""
        self.server_ready = 0.0
        """Simulated time the server state was last updated."""
        self._totals = RoundTotals()
        self._wall_start = time.perf_counter()
        self._train_wall_s = 0.0

    # --- decisions -------------------------------------------------------------------
    @property
    def clients_per_round(self) -> int:
        """k: ``protocol.clients_per_round``, or the participation fraction of all clients."""
        n = len(self.clients)
        return self.protocol.clients_per_round or max(1, round(self.protocol.participation * n))

    def select(
        self, round_: int, candidates: Sequence[int] | None = None, k: int | None = None
    ) -> list[int]:
        """``k`` clients (default: clients per round) for ``round_``, sorted, from the selection stream.

        ``candidates`` restricts the choice (e.g. to idle clients).
        """
        pool = list(range(len(self.clients))) if candidates is None else sorted(candidates)
        k = self.clients_per_round if k is None else k
        if k >= len(pool):
            return pool
        rng = numpy_rng(self.seed, "selection", round_)
        p = None
        if self.protocol.selection == "data_size":
            sizes = np.asarray([self.num_samples[c] for c in pool], dtype=float)
            p = sizes / sizes.sum()
        return sorted(pool[int(i)] for i in rng.choice(len(pool), size=k, replace=False, p=p))

    def context(self, round_: int, client: int | None) -> RoundContext:
        """The :class:`RoundContext` of a hook run by the simulator (downlink, aggregate)."""
        sizes = (
            {}
            if client is None or client < 0
            else {k: len(v) for k, v in self.indices[client].items()}
        )
        return RoundContext(round_, client, sizes, self.seed)

    def payloads(self, selected: Sequence[int], round_: int = 0) -> dict[int, Payload | None]:
        """The downlink payload of each selected client (one shared object if broadcast)."""
        if self.algorithm.broadcast:
            shared = self.algorithm.downlink(self.server_state, self.context(round_, None))
            return {c: shared for c in selected}
        return {
            c: self.algorithm.downlink(self.server_state, self.context(round_, c)) for c in selected
        }

    def execute(
        self,
        round_: int,
        payloads: dict[int, Payload | None],
        tasks: tuple[str, ...] | None = None,
        steps: dict[int, dict[str, int]] | None = None,
    ) -> dict[int, JobResult]:
        """Run clients' jobs now (real work; no simulated time passes).

        ``tasks`` restricts the job to some of the round's tasks and
        ``steps[client]`` overrides their step counts (wait-free windows).
        """
        jobs = [
            ClientJob(
                c,
                round_,
                self.client_states[c],
                payload,
                self.indices[c],
                tasks,
                (steps or {}).get(c, {}),
            )
            for c, payload in payloads.items()
        ]
        started = time.perf_counter()
        results = {r.client: r for r in self.executor.run(jobs)}
        self._train_wall_s += time.perf_counter() - started
        return results

    def tasks(self, round_: int) -> tuple[Task, ...]:
        """The algorithm's client tasks of ``round_``."""
        return self.algorithm.round_tasks(round_)

    def downlink_transfers(
        self, round_: int, payloads: dict[int, Payload | None]
    ) -> dict[int, Transfer]:
        """Timing of this round's downlink to each selected client.

        The payload goes out as one broadcast only when the algorithm sends
        the same payload to everyone and ``network.downlink.mode`` is
        ``broadcast``; otherwise each client gets its own unicast copy.
        """
        sizes: dict[int, int] = {}  # by payload identity: a broadcast payload is sized once
        nbytes = {}
        for c, payload in payloads.items():
            if id(payload) not in sizes:
                sizes[id(payload)] = payload_nbytes(payload)
            nbytes[c] = sizes[id(payload)]
        broadcast = self.algorithm.broadcast and self.network.config.downlink.mode == "broadcast"
        transfers = self.network.downlink(nbytes, round_, broadcast)
        if transfers and any(nbytes.values()):
            sent = max(nbytes.values()) if broadcast else sum(nbytes.values())
            self._record_send(round_, "downlink-send", sent, transfers)
        return transfers

    def _record_send(
        self, round_: int, phase: str, nbytes: int, transfers: dict[int, Transfer]
    ) -> float:
        """Record the server's transmission of ``transfers`` from now; return its airtime."""
        on_air = max(t.duration_s for t in transfers.values())
        self.recorder.event(
            round_,
            SERVER,
            phase,
            self.env.now,
            self.env.now + on_air,
            nbytes=nbytes,
            energy_j=self.network.server_tx_power_w * on_air,
        )
        return on_air

    # --- timed activities (process generators) ----------------------------------------
    def download(self, round_: int, transfer: Transfer) -> Process:
        """Client receives its downlink payload."""
        if transfer.nbytes == 0:
            return
        start = self.env.now
        yield self.env.timeout(transfer.duration_s)
        self._totals.bytes_down += transfer.nbytes
        self.recorder.event(
            round_,
            transfer.client,
            "download",
            start,
            self.env.now,
            nbytes=transfer.nbytes,
            rate_bps=transfer.rate_bps,
            snr_db=transfer.snr_db,
        )

    def compute(self, round_: int, client: int, task: Task, flops: int) -> Process:
        """Client runs one task: duration = metered FLOPs / device FLOP/s.

        A client computes one task at a time: the task starts when the
        client's previous computation has finished (wait-free training can
        still be busy with the personalized task when the next model arrives).
        """
        if self.busy_until[client] > self.env.now:
            yield self.env.timeout(self.busy_until[client] - self.env.now)
        start = self.env.now
        seconds, energy = self._occupy(client, flops, start)
        yield self.env.timeout(seconds)
        self.recorder.event(
            round_,
            client,
            f"compute:{task.name}",
            start,
            self.env.now,
            flops=flops,
            energy_j=energy,
        )

    def compute_tasks(self, round_: int, result: JobResult, tasks: Sequence[Task]) -> Process:
        """Client runs ``tasks`` of a finished job one after another (those the job ran)."""
        for task in tasks:
            if task.name in result.task_flops:
                yield from self.compute(round_, result.client, task, result.task_flops[task.name])

    def upload(self, round_: int, client: int, payload: Payload) -> Process:
        """Client sends its upload on its own bandwidth; returns the transfer."""
        transfer = self.network.uplink(client, payload_nbytes(payload), round_)
        seconds, energy = transmit_cost(
            transfer.nbytes, transfer.rate_bps, self.clients[client].tx_power_w
        )
        start = self.env.now
        yield self.env.timeout(seconds)
        self._totals.bytes_up += transfer.nbytes
        self.recorder.event(
            round_,
            client,
            "upload",
            start,
            self.env.now,
            nbytes=transfer.nbytes,
            energy_j=energy,
            rate_bps=transfer.rate_bps,
            snr_db=transfer.snr_db,
        )
        return transfer

    def aggregate(self, round_: int, uploads: list[Upload]) -> Process:
        """Server aggregates (FLOPs / server FLOP/s), then runs its server tasks, if any."""
        flops = self.algorithm.aggregation_flops(self.server_state, uploads)
        yield from self._server_compute(round_, "aggregate", flops)
        self.server_state = self.algorithm.aggregate(
            self.server_state, uploads, self.context(round_, SERVER)
        )
        yield from self.server_work(round_)

    def mix(self, round_: int, upload: Upload, weight: float, flops: int | None = None) -> Process:
        """Asynchronous server update through the algorithm's ``mix`` hook, timed like aggregate.

        ``flops`` defaults to averaging the upload with the current values of
        the same entries (two payloads of the upload's size).
        """
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
        self._train_wall_s += time.perf_counter() - started
        self.server_state = result.state
        for task in tasks:
            if task.name in result.task_flops:
                flops = result.task_flops[task.name]
                yield from self._server_compute(round_, f"server:{task.name}", flops)

    def _server_compute(self, round_: int, phase: str, flops: int) -> Process:
        """The server device computes ``flops`` FLOPs now; the event is recorded when done."""
        seconds, energy = compute_cost(flops, self.server_device)
        start = self.env.now
        yield self.env.timeout(seconds)
        self.server_ready = self.env.now
        self.recorder.event(
            round_, SERVER, phase, start, self.env.now, flops=flops, energy_j=energy
        )

    def public_download(self) -> Process:
        """Every client downloads the public split once, before round 0 (a broadcast)."""
        if not self.public_nbytes:
            return
        nbytes = dict.fromkeys(range(len(self.clients)), self.public_nbytes)
        transfers = self.network.downlink(nbytes, -1, True)
        start = self.env.now
        on_air = self._record_send(-1, "downlink-send:public", self.public_nbytes, transfers)
        for c, t in transfers.items():
            self.recorder.event(
                -1,
                c,
                "download:public",
                start,
                start + t.duration_s,
                nbytes=t.nbytes,
                rate_bps=t.rate_bps,
                snr_db=t.snr_db,
            )
        yield self.env.timeout(on_air)

    # --- bookkeeping -----------------------------------------------------------------
    def end_round(
        self, round_: int, round_start: float, selected: Sequence[int], **extra: Any
    ) -> None:
        """Evaluate (every ``eval_every`` rounds and at the end) and record the round row.

        ``t_personal`` is when every state the evaluation read was complete:
        the server state and each client's committed state (see
        :meth:`commit`), never a state still being computed (an asynchronous
        or late client's). It lies after ``t_end`` when wait-free personal
        training outlasts the round.
        ``extra`` adds protocol-specific columns.
        """
        last = round_ == self.protocol.rounds - 1
        evaluation = None
        if (round_ + 1) % self.protocol.eval_every == 0 or last:
            evaluation = self.evaluator.evaluate(
                self.algorithm, self.server_state, self.client_states, round_ + 1
            )
            self.last_evaluation = evaluation
        now = time.perf_counter()
        nan = float("nan")
        row = {
            "round": round_,
            "t_start": round_start,
            "t_end": self.env.now,
            "t_personal": max(self.server_ready, max(self.state_ready, default=0.0)),
            "num_selected": len(selected),
            "generic_acc": evaluation.generic_acc if evaluation else nan,
            "personal_acc": evaluation.personal_acc if evaluation else nan,
            "personal_acc_std": evaluation.personal_acc_std if evaluation else nan,
            "bytes_up": self._totals.bytes_up,
            "bytes_down": self._totals.bytes_down,
            "wall_s": now - self._wall_start,
            "wall_train_s": self._train_wall_s,
            **extra,
        }
        self.recorder.round(**row)
        self._totals = RoundTotals()
        self._wall_start = now
        self._train_wall_s = 0.0
        if self.on_round is not None:
            self.on_round(row)

    def _occupy(self, client: int, flops: int, start: float) -> tuple[float, float]:
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
        seconds, energy = self._occupy(client, flops, start)
        end = start + seconds
        self.recorder.event(
            round_, client, f"compute:{task.name}", start, end, flops=flops, energy_j=energy
        )
        return end

    def step_seconds(self, client: int, round_: int, task: Task, payload: Payload | None) -> float:
        """Simulated seconds of one SGD step of ``task`` on ``client``'s device.

        The step is metered like any other (see :class:`~mecsim.cost.StepMeter`),
        from the state and payload the task would start from.
        """
        assert self.training is not None, "step_seconds needs the run's TrainingContext"
        algorithm = self.algorithm
        state = self.client_states[client]
        job = ClientJob(client, round_, state, payload, self.indices[client])
        ctx = job_context(job, self.seed)
        start = algorithm.begin_task(task, state, payload, ctx)
        consts = self.training.constants(task, state, start, payload, ctx)
        schedule = algorithm.schedule(task)
        flops = step_flops(self.training, client, task, schedule, start, consts, job.indices)
        extra = self.training.extra_flops(task, start, consts, 2) - self.training.extra_flops(
            task, start, consts, 1
        )
        return (flops + extra) / self.clients[client].device.flops_per_s

    def commit(self, client: int, state: ClientState, ready: float) -> None:
        """Make ``state`` the client's current state, complete at simulated time ``ready``.

        ``ready`` may lie in the future (wait-free personal training still
        running); the round row's ``t_personal`` reads it.
        """
        self.client_states[client] = state
        self.state_ready[client] = ready

    def compute_seconds(self, client: int, flops: int) -> float:
        """Simulated seconds ``client``'s device takes for ``flops``."""
        return compute_cost(flops, self.clients[client].device)[0]

    def _run(self, protocol_process: Callable[[Simulation], Process]) -> Process:
        yield from self.public_download()
        yield from protocol_process(self)

    def run(self, protocol_process: Callable[[Simulation], Process]) -> None:
        """Run ``protocol_process`` (a server process) to completion.

        Objects built before the run (datasets, client states, thousands of
        client profiles) are frozen out of the cyclic garbage collector while
        the event loop runs: they are long-lived, and rescanning them made
        full collections take half the wall time of a 10,000-client round.
        They are still freed by reference counting.
        """
        gc.freeze()
        try:
            # stop when the protocol is done (asynchronous clients may still be busy)
            self.env.run(until=self.env.process(self._run(protocol_process)))
        finally:
            gc.unfreeze()
