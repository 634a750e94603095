"""The simulator: one SimPy environment, timed activities, and the run's state.

Simulated time (``env.now``, seconds) advances only by cost-model durations;
wall-clock time is measured separately per round. Each protocol step is a
short process generator here (:meth:`download`, :meth:`compute`,
:meth:`upload`, :meth:`aggregate`); a protocol (``mecsim.protocols``)
composes them. Simultaneous events run in scheduling order (SimPy's heap is
keyed by time, priority and insertion id), so runs are deterministic.
"""

from __future__ import annotations

import functools
import gc
import logging
import math
import time
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from mecsim.algorithms.base import (
    SERVER,
    Algorithm,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
    schedule_of,
    start_of,
)
from mecsim.channels.sharing import Reception, Transmission
from mecsim.checkpoint import Ledger
from mecsim.cost import compute_cost
from mecsim.devices import DeviceProfile
from mecsim.errors import ConfigError
from mecsim.evaluation import Evaluation, Evaluator
from mecsim.executors import ClientJob, Executor, JobResult, TrainingContext
from mecsim.executors.base import job_context, step_flops
from mecsim.faults import Drop, Faults
from mecsim.network import ClientProfile, Delivery, Network
from mecsim.newcomers import welcome
from mecsim.recorder import Recorder
from mecsim.rng import numpy_rng
from mecsim.state import ModelState, Payload, payload_nbytes, state_nbytes

if TYPE_CHECKING:
    from mecsim.checkpoint import Checkpointer
    from mecsim.protocols.settings import ProtocolSettings

Process = Generator[simpy.Event, Any, Any]

log = logging.getLogger(__name__)


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
        faults: Faults | None = None,
        checkpointer: Checkpointer | None = None,
        bulk_rounds: bool = True,
        new_clients: int = 0,
        new_client_adaptation: str = "algorithm",
        new_client_epochs: int = 1,
    ) -> None:
        self.env = simpy.Environment()
        network.bind(self.env)
        self.algorithm = algorithm
        self.executor = executor
        self.network = network
        self.clients = list(clients)
        self.trainers = range(len(self.clients) - new_clients)
        """The clients that train; the last ``new_clients`` join after the last round
        (:mod:`mecsim.newcomers`)."""
        self.new_client_adaptation = new_client_adaptation
        self.new_client_epochs = new_client_epochs
        self.newcomer_models: dict[int, ModelState | None] = {}
        """Each new client's adapted model, once it has joined."""
        self.indices = list(indices)  # read, never written: no copies of 100,000 dicts
        self.num_samples = [i["train"].shape[0] for i in self.indices]
        self.server_device = server_device
        self.evaluator = evaluator
        self.protocol = protocol
        self.seed = seed
        self.public_nbytes = public_nbytes
        self.training = training
        """The executors' shared context (architectures, data, FLOP meter), if any."""
        self.on_round = on_round
        self.faults = faults if faults is not None and faults.active else None
        """Client dropout and availability (see :mod:`mecsim.faults`), if any."""
        self.checkpointer = checkpointer
        """Saves checkpoints at round ends, or swaps a saved one in (``--resume``)."""
        self.bulk_rounds = bulk_rounds
        """Whether protocols may run a round's clients in bulk (:mod:`mecsim.protocols.bulk`)."""
        self.ledger = Ledger(keep=checkpointer is not None)
        """Payloads and job results processes hold across events (what a checkpoint saves)."""
        self.recorder = Recorder()
        self.server_state_peak_bytes = 0
        """Largest server state (tensor bytes) held so far; see :func:`state_nbytes`."""
        self.server_state = algorithm.init_server_state()
        self.client_states = [algorithm.init_client_state(c.id) for c in self.clients]
        self.client_state_peak_bytes = [state_nbytes(s) for s in self.client_states]
        """Per client: largest state it kept between jobs (models, teachers, variates)."""
        self.last_evaluation: Evaluation | None = None
        self.busy_until = [0.0] * len(self.clients)
        """Per client: simulated time its current computation ends."""
        self.state_ready = [0.0] * len(self.clients)
        """Per client: simulated time the state in ``client_states`` is (or will be) complete."""
        self.server_ready = 0.0
        """Simulated time the server state was last updated."""
        self._wall_start = time.perf_counter()
        self._train_wall_s = 0.0
        self._updates = 0
        self.total_updates = 0
        """Client updates the server has applied (this round / in all)."""
        self._in_progress: dict[int, Callable[[], None]] = {}
        """Activities under way, each with what records it if the run ends first."""
        self._activities = 0

    @property
    def server_state(self) -> ServerState:
        """The algorithm's server state; every assignment updates its peak size."""
        return self._server_state

    @server_state.setter
    def server_state(self, state: ServerState) -> None:
        self._server_state = state
        self.server_state_peak_bytes = max(self.server_state_peak_bytes, state_nbytes(state))

    @functools.cached_property
    def device_arrays(self) -> dict[str, np.ndarray]:
        """Per client (by id): its device's FLOP/s and compute and receive power."""
        devices = [c.device for c in self.clients]
        return {
            "flops_per_s": np.array([d.flops_per_s for d in devices], dtype=float),
            "power_w": np.array([d.power_w for d in devices], dtype=float),
            "rx_power_w": np.array([d.rx_power_w for d in devices], dtype=float),
        }

    # --- decisions -------------------------------------------------------------------
    @property
    def clients_per_round(self) -> int:
        """k: ``protocol.clients_per_round``, or the participation fraction of all clients."""
        return self.protocol.round_size(len(self.trainers))

    def select(
        self, round_: int, candidates: Sequence[int] | None = None, k: int | None = None
    ) -> list[int]:
        """``k`` clients (default: clients per round) for ``round_``, sorted, from the selection stream.

        ``candidates`` restricts the choice (e.g. to idle clients); offline
        clients (``faults.availability``) and new clients (:attr:`trainers`) are never chosen.
        """
        pool = list(self.trainers) if candidates is None else sorted(candidates)
        pool = [c for c in pool if c in self.trainers]
        if self.faults is not None:
            pool = [c for c in pool if self.faults.online(c, self.env.now)]
        k = self.clients_per_round if k is None else k
        if k >= len(pool):
            return pool
        rng = numpy_rng(self.seed, "selection", round_)
        p = None
        if self.protocol.selection == "data_size":
            sizes = np.asarray([self.num_samples[c] for c in pool], dtype=float)
            p = sizes / sizes.sum()
        return sorted(pool[int(i)] for i in rng.choice(len(pool), size=k, replace=False, p=p))

    def wait_for_online(self, candidates: Sequence[int] | None = None) -> Process:
        """Wait until one of ``candidates`` (default: every client) is online."""
        if self.faults is None:
            return
        pool = self.trainers if candidates is None else candidates
        t = self.faults.next_online(pool, self.env.now)
        if math.isinf(t):
            raise ConfigError(
                "faults.availability",
                f"no client is online after t = {self.env.now:.6g} s and the run needs more "
                "rounds; extend the trace or lower protocol.rounds",
            )
        if t > self.env.now:
            yield self.env.timeout(t - self.env.now)

    def context(self, round_: int, client: int | None) -> RoundContext:
        """The :class:`RoundContext` of a hook run by the simulator (downlink, aggregate)."""
        sizes = (
            {}
            if client is None or client < 0
            else {k: v.shape[0] for k, v in self.indices[client].items()}
        )
        return RoundContext(round_, client, sizes, self.seed)

    def prepare_downlinks(self, round_: int, selected: Sequence[int]) -> Process:
        """The algorithm's work on the round's selection, timed on the server before the
        downloads start (phase ``server:prepare``)."""
        flops = self.algorithm.preparation_flops(self.server_state, selected)
        self.server_state = self.algorithm.prepare_downlinks(
            self.server_state, list(selected), self.context(round_, SERVER)
        )
        if flops:
            yield from self._server_compute(round_, "server:prepare", flops)

    def payloads(self, selected: Sequence[int], round_: int = 0) -> dict[int, Payload | None]:
        """The downlink payload of each selected client (one shared object if broadcast)."""
        if self.algorithm.broadcast:
            shared = self.payload(round_, None)
            return {c: shared for c in selected}
        return {c: self.payload(round_, c) for c in selected}

    def payload(self, round_: int, client: int | None) -> Payload | None:
        """The algorithm's downlink payload for ``client`` (None: the broadcast one) now."""
        context = self.context(round_, client)
        return self.ledger.add(self.algorithm.downlink(self.server_state, context))

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
        steps = steps or {}
        defaults: dict[str, int] = {}  # one read-only dict for the jobs without overrides
        jobs = [
            ClientJob(
                c,
                round_,
                self.client_states[c],
                payload,
                self.indices[c],
                tasks,
                steps.get(c, defaults),
            )
            for c, payload in payloads.items()
        ]
        started = time.perf_counter()
        results = {r.client: self.ledger.add_result(r) for r in self.executor.run(jobs)}
        self._train_wall_s += time.perf_counter() - started
        return results

    def tasks(self, round_: int) -> tuple[Task, ...]:
        """The algorithm's client tasks of ``round_``."""
        return self.algorithm.round_tasks(round_)

    def downlink_transfers(
        self,
        round_: int,
        payloads: dict[int, Payload | None],
        key: tuple | None = None,
        join: object = None,
    ) -> dict[int, Delivery]:
        """Start this round's downlink to each client now; return each client's delivery.

        The payload goes out as one broadcast only when the algorithm sends
        the same payload to everyone and ``network.downlink.mode`` is
        ``broadcast``; otherwise each client gets its own unicast transmission.
        All share the server's radio (:class:`~mecsim.network.Network`).
        ``key`` names the transmission's fading streams (default: the round);
        broadcasts with the same ``join`` key started at the same instant are
        one transmission.
        """
        sizes: dict[int, int] = {}  # by payload identity: a broadcast payload is sized once
        nbytes = {}
        for c, payload in payloads.items():
            if id(payload) not in sizes:
                sizes[id(payload)] = payload_nbytes(payload)
            nbytes[c] = sizes[id(payload)]
        broadcast = self.algorithm.broadcast and self.network.config.downlink.mode == "broadcast"
        key = ("round", round_) if key is None else key
        return self._transmit(round_, nbytes, key, broadcast, join=join)

    def _transmit(
        self,
        round_: int,
        nbytes: dict[int, int],
        key: tuple,
        broadcast: bool,
        phase: str = "downlink-send",
        join: object = None,
    ) -> dict[int, Delivery]:
        """Start the server's transmission(s) now; each is recorded when it ends."""
        deliveries, started = self.network.downlink(nbytes, key, broadcast, join)
        for sent in started:
            tx, n = sent.transmission, sent.nbytes
            token = self._begin(lambda tx=tx, n=n: self._record_send(round_, phase, n, tx))
            sent.done.callbacks.append(
                lambda event, n=n, token=token: self._record_send(
                    round_, phase, n, event.value, token
                )
            )
        return deliveries

    def _record_send(
        self, round_: int, phase: str, nbytes: int, t: Transmission, token: int | None = None
    ) -> None:
        """Record the server's transmission ``t`` of ``nbytes``: ended, or (still open when
        the run ends) cut off now with the bytes its best receiver got and the energy of
        the power share it held so far."""
        if token is not None:
            self._end(token)
        end = t.end
        if end is None:
            phase, end = f"{phase}:cutoff", self.env.now
            nbytes = max(int(r.bits - r.remaining) // 8 for r in t.receptions)
        self.recorder.event(
            round_,
            SERVER,
            phase,
            t.start,
            end,
            direction="down",
            role="sender",
            nbytes=nbytes,
            energy_j=t.energy_j,
        )

    # --- timed activities (process generators) ----------------------------------------
    def download(self, round_: int, delivery: Delivery | None, job: int | None = None) -> Process:
        """Client receives its downlink payload; returns whether it arrived (None: nothing sent).

        A failed reception (``network.max_transfer_s``) is retried
        ``network.retries`` times as a unicast transmission to that client.
        """
        if delivery is None:
            return True
        reception = yield from self._receive(round_, job, delivery)
        for attempt in range(1, self.network.config.retries + 1):
            if not reception.failed:
                break
            key = (*delivery.key, "retry", attempt)
            retry = self._transmit(round_, {reception.client: delivery.nbytes}, key, False)
            reception = yield from self._receive(round_, job, retry[reception.client])
        return not reception.failed

    def _receive(self, round_: int, job: int | None, delivery: Delivery) -> Process:
        """Wait for one reception to end and record it (cut off if the run ends first)."""
        r, nbytes = delivery.reception, delivery.nbytes
        token = self._begin(lambda: self._record_download(round_, job, r, nbytes))
        reception = yield delivery.done
        self._end(token)
        self._record_download(round_, job, reception, nbytes)
        return reception

    def _record_download(
        self, round_: int, job: int | None, r: Reception, nbytes: int, phase: str = "download"
    ) -> None:
        """Record a client's reception of a download (see :meth:`_record_transfer`)."""
        rx_power_w = self.clients[r.client].device.rx_power_w
        self._record_transfer(round_, job, r.client, r, nbytes, phase, "down", rx_power_w)

    def _record_transfer(
        self,
        round_: int,
        job: int | None,
        client: int,
        r: Reception,
        nbytes: int,
        phase: str,
        direction: str,
        power_w: float,
    ) -> None:
        """Record the client's side of a transfer (``down``: it receives at ``power_w``;
        ``up``: it sends): ended (delivered or failed), or still open and cut off now with
        the bits it carried so far."""
        if r.end is None:
            r, phase = r.cut(self.env.now), f"{phase}:cutoff"
            nbytes = int(r.bits) // 8
        self.recorder.event(
            round_,
            client,
            f"{phase}:failed" if r.failed else phase,
            r.start,
            r.end,
            duration_s=r.duration_s,
            job=job,
            direction=direction,
            role="receiver" if direction == "down" else "sender",
            nbytes=0 if r.failed else nbytes,
            energy_j=power_w * r.duration_s,
            rate_bps=r.effective_rate_bps,
            snr_db=r.mean_sinr_db,
        )

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
        seconds, energy = self._occupy(client, flops, start)
        phase = f"compute:{task.name}"
        token = self._begin(
            lambda: self._record_cut_compute(round_, client, phase, flops, seconds, start, job)
        )
        yield self.env.timeout(seconds)
        self._end(token)
        self.recorder.event(
            round_,
            client,
            phase,
            start,
            self.env.now,
            duration_s=seconds,
            job=job,
            flops=flops,
            energy_j=energy,
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
            energy_j=self.clients[client].device.power_w * elapsed,
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
        returns False if the client dropped out (see :mod:`mecsim.faults`)."""
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

    def still_online(self, round_: int, client: int, job: int | None = None) -> bool:
        """Whether ``client`` is online now; if not, record its ``fault:offline`` event."""
        if self.faults is None or self.faults.online(client, self.env.now):
            return True
        now = self.env.now
        self.recorder.event(round_, client, "fault:offline", now, now, job=job)
        return False

    def upload(self, round_: int, client: int, payload: Payload, job: int | None = None) -> Process:
        """Client sends its upload on its own band; returns whether it arrived.

        Time spent waiting for spectrum (a finite ``network.uplink`` cell band)
        is a ``wait:spectrum`` event; a failed transfer is an ``upload:failed``
        event and is retried ``network.retries`` times.
        """
        nbytes = payload_nbytes(payload)
        job_key = round_ if job is None else job
        for attempt in range(self.network.config.retries + 1):
            key = ("job", job_key, attempt)
            asked = self.env.now
            granted: list[float] = []  # when the band was granted, once it is
            token = self._begin(
                lambda key=key, asked=asked, granted=granted: self._cut_upload(
                    round_, client, nbytes, key, asked, granted, job
                )
            )
            start, r = yield from self.network.upload(client, nbytes, key, granted.append)
            self._end(token)
            self._record_upload(round_, client, nbytes, asked, start, r, job)
            if not r.failed:
                return True
        return False

    def _record_upload(
        self,
        round_: int,
        client: int,
        nbytes: int,
        asked: float,
        granted: float,
        r: Reception,
        job: int | None,
    ) -> None:
        """Record the wait for spectrum, if any, and the upload (ended, or cut off now)."""
        if granted > asked:
            self.recorder.event(
                round_, client, "wait:spectrum", asked, granted, job=job, direction="up"
            )
        power_w = self.clients[client].tx_power_w
        self._record_transfer(round_, job, client, r, nbytes, "upload", "up", power_w)

    def _cut_upload(
        self,
        round_: int,
        client: int,
        nbytes: int,
        key: tuple,
        asked: float,
        granted: list[float],
        job: int | None,
    ) -> None:
        """An upload still waiting for spectrum or on the air when the run ends."""
        now = self.env.now
        if not granted:
            if now > asked:
                self.recorder.event(
                    round_, client, "wait:spectrum", asked, now, job=job, direction="up"
                )
            return
        r = self.network.upload_progress(client, nbytes, key, granted[0], now)
        self._record_upload(round_, client, nbytes, asked, granted[0], r, job)

    def aggregate(self, round_: int, uploads: list[Upload]) -> Process:
        """Server aggregates (FLOPs / server FLOP/s), then runs its server tasks, if any."""
        flops = self.algorithm.aggregation_flops(self.server_state, uploads)
        self._updates += len(uploads)
        yield from self._server_compute(round_, "aggregate", flops)
        self.server_state = self.algorithm.aggregate(
            self.server_state, uploads, self.context(round_, SERVER)
        )
        yield from self.server_work(round_)

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

    def _server_compute(self, round_: int, phase: str, flops: int) -> Process:
        """The server device computes ``flops`` FLOPs now; the event is recorded when done."""
        seconds, energy = compute_cost(flops, self.server_device)
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
        )

    def public_download(self) -> Process:
        """Every client downloads the public split once, before round 0 (a broadcast)."""
        if not self.public_nbytes:
            return
        nbytes = dict.fromkeys(range(len(self.clients)), self.public_nbytes)
        deliveries = self._transmit(-1, nbytes, ("public",), True, "downlink-send:public")
        receptions = yield self.env.all_of([d.done for d in deliveries.values()])
        for r in receptions.values():
            self._record_download(-1, None, r, self.public_nbytes, "download:public")

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
                self.algorithm, self.server_state, self.client_states, round_ + 1, selected
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
            "wall_s": now - self._wall_start,
            "wall_train_s": self._train_wall_s,
            "updates": self._updates,
            **extra,
        }
        if self._updates == 0 and any(t.uploads for t in self.tasks(round_)):
            log.warning(
                "round %d: no client update reached the server (deadline, failed or "
                "late transfers); the global model did not change",
                round_,
            )
        self.total_updates += self._updates
        self._updates = 0
        self.recorder.round(**row)
        self._wall_start = now
        self._train_wall_s = 0.0
        if self.checkpointer is not None:
            self.checkpointer.after_round(self, len(self.recorder._rounds))
        self.ledger.prune()
        if self.on_round is not None:
            self.on_round(row)

    def restart_wall_clock(self) -> None:
        """Measure the next round's wall time from now (after a resumed run's replay)."""
        self._wall_start = time.perf_counter()
        self._train_wall_s = 0.0

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

        The step is metered like any other (see :class:`~mecsim.cost.StepMeter`),
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
        extra = self.training.extra_flops(task, start, consts, 2) - self.training.extra_flops(
            task, start, consts, 1
        )
        return (flops + extra) / self.clients[client].device.flops_per_s

    def commit(
        self, client: int, state: ClientState, ready: float, nbytes: int | None = None
    ) -> None:
        """Make ``state`` the client's current state, complete at simulated time ``ready``.

        ``ready`` may lie in the future (wait-free personal training still
        running); the round row's ``t_personal`` reads it. ``nbytes``: the state's
        :func:`~mecsim.state.state_nbytes` when the caller knows it.
        """
        self.client_states[client] = state
        self.state_ready[client] = ready
        peak = self.client_state_peak_bytes
        size = state_nbytes(state) if nbytes is None else nbytes
        if size > peak[client]:
            peak[client] = size

    def compute_seconds(self, client: int, flops: int) -> float:
        """Simulated seconds ``client``'s device takes for ``flops``."""
        return compute_cost(flops, self.clients[client].device)[0]

    def _run(self, protocol_process: Callable[[Simulation], Process]) -> Process:
        yield from self.public_download()
        yield from protocol_process(self)
        yield from welcome(self, self.new_client_adaptation, self.new_client_epochs)

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
        except RuntimeError as error:
            if self.faults is None or "No scheduled events left" not in str(error):
                raise
            raise ConfigError(
                "faults.availability",
                f"the run stalled at t = {self.env.now:.6g} s: no client is online or comes "
                "back, and the protocol needs more updates; extend the trace",
            ) from None
        finally:
            gc.unfreeze()
        self._cut_off()
        if self._uploads and self.total_updates == 0:
            raise ConfigError(
                "protocol",
                "no client update reached the server in any round: every upload was late, "
                "dropped or failed; lengthen protocol.deadline_s or network.max_transfer_s, "
                "or lower network.min_snr_db",
            )

    def _begin(self, record_cut_off: Callable[[], None]) -> int:
        """Note an activity under way; ``record_cut_off`` records it if the run ends first."""
        token = self._activities
        self._activities += 1
        self._in_progress[token] = record_cut_off
        return token

    def _end(self, token: int) -> None:
        """The activity ``token`` ended (and records itself)."""
        self._in_progress.pop(token, None)

    def _cut_off(self) -> None:
        """The run ends when the protocol's last update lands: whatever is still under way
        (asynchronous clients, late deadline clients) is recorded as cut off at that
        instant, with the bytes, FLOPs and energy it really used, in the order it began;
        an activity that ended at this very instant, its event not yet processed, is
        recorded as ended. So the server radio's rows account for all of its air time."""
        if not self._in_progress:
            return
        self.network.sync()
        for record in list(self._in_progress.values()):
            record()
        self._in_progress.clear()

    @property
    def _uploads(self) -> bool:
        """Whether the algorithm's clients upload at all (``local`` does not)."""
        return any(t.uploads for t in self.algorithm.round_tasks(0))
