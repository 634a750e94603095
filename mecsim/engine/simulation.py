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
import logging
import math
import time
from collections.abc import Callable, Sequence
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
)
from mecsim.common.errors import ConfigError
from mecsim.common.gc_pause import event_loop_gc
from mecsim.common.registry import Registry
from mecsim.engine.checkpoint import Ledger
from mecsim.engine.compute import Computing
from mecsim.engine.evaluation import Evaluation, Evaluator
from mecsim.engine.faults import Faults
from mecsim.engine.newcomers import welcome
from mecsim.engine.process import Process
from mecsim.engine.recorder import Recorder
from mecsim.engine.scheduling import Scheduling
from mecsim.engine.server import ServerWork
from mecsim.engine.transfers import Transfers
from mecsim.executors import ClientJob, Executor, JobResult, TrainingContext
from mecsim.learning.devices import DEVICES, DeviceProfile
from mecsim.learning.state import ModelState, Payload, state_nbytes
from mecsim.net.network import ClientProfile, Network
from mecsim.policies.scheduling import SchedulingPolicy, SchedulingSettings
from mecsim.policies.scheduling.uniform import Uniform

if TYPE_CHECKING:
    from mecsim.engine.checkpoint import Checkpointer
    from mecsim.protocols.settings import ProtocolSettings


log = logging.getLogger(__name__)


class Simulation(Transfers, Computing, ServerWork, Scheduling):
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
        scheduler: SchedulingPolicy | None = None,
        devices: Registry[DeviceProfile] | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.devices = DEVICES if devices is None else devices
        """The devices a name may refer to (the scenario's ``[[devices]]`` among them)."""
        network.bind(self.env)
        self.algorithm = algorithm
        self.executor = executor
        self.network = network
        self.clients = list(clients)
        self.trainers = range(len(self.clients) - new_clients)
        """The clients that train; the last ``new_clients`` join after the last round
        (:mod:`mecsim.engine.newcomers`)."""
        self.new_client_adaptation = new_client_adaptation
        self.new_client_epochs = new_client_epochs
        self.newcomer_models: dict[int, ModelState | None] = {}
        """Each new client's adapted model, once it has joined."""
        self.indices = list(indices)  # read, never written: no copies of 100,000 dicts
        self.num_samples = [i["train"].shape[0] for i in self.indices]
        network.data_sizes = self.num_samples  # an allocation in proportion to data reads it
        self.server_device = server_device
        self.evaluator = evaluator
        self.protocol = protocol
        self.seed = seed
        self.public_nbytes = public_nbytes
        self.training = training
        """The executors' shared context (architectures, data, FLOP meter), if any."""
        self.on_round = on_round
        self.faults = faults if faults is not None and faults.active else None
        """Client dropout and availability (see :mod:`mecsim.engine.faults`), if any."""
        self.checkpointer = checkpointer
        """Saves checkpoints at round ends, or swaps a saved one in (``--resume``)."""
        self.bulk_rounds = bulk_rounds
        """Whether protocols may run a round's clients in bulk (:mod:`mecsim.protocols.bulk`)."""
        self.ledger = Ledger(keep=checkpointer is not None)
        """Payloads and job results processes hold across events (what a checkpoint saves)."""
        self.recorder = Recorder()
        if len(network.cells) > 1:  # the events table says which cell each row is in
            self.recorder.cells = _CellNow(network)
        network.on_resend = self._resent
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
        self.start_scheduling(scheduler or Uniform(SchedulingSettings()))

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
        for client, result in results.items():
            self.job_begun(client, payloads[client], result)
        return results

    def tasks(self, round_: int) -> tuple[Task, ...]:
        """The algorithm's client tasks of ``round_``."""
        return self.algorithm.round_tasks(round_)

    # --- timed activities (process generators) ----------------------------------------

    def still_online(self, round_: int, client: int, job: int | None = None) -> bool:
        """Whether ``client`` is online now; if not, record its ``fault:offline`` event."""
        if self.faults is None or self.faults.online(client, self.env.now):
            return True
        now = self.env.now
        self.recorder.event(round_, client, "fault:offline", now, now, job=job)
        return False

    # --- bookkeeping -----------------------------------------------------------------
    def end_round(
        self,
        round_: int,
        round_start: float,
        selected: Sequence[int],
        updates: int | None = None,
        **extra: Any,
    ) -> None:
        """Evaluate (every ``eval_every`` rounds and at the end) and record the round row.

        ``t_personal`` is when every state the evaluation read was complete:
        the server state and each client's committed state (see
        :meth:`commit`), never a state still being computed (an asynchronous
        or late client's). It lies after ``t_end`` when wait-free personal
        training outlasts the round.
        ``updates``: the client updates the round applied, when the protocol counts them
        itself (default: those :meth:`aggregate` and :meth:`mix` applied since the last
        round); ``extra`` adds protocol-specific columns.
        """
        if updates is not None:
            self._updates += updates
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

    def commit(
        self, client: int, state: ClientState, ready: float, nbytes: int | None = None
    ) -> None:
        """Make ``state`` the client's current state, complete at simulated time ``ready``.

        ``ready`` may lie in the future (wait-free personal training still
        running); the round row's ``t_personal`` reads it. ``nbytes``: the state's
        :func:`~mecsim.learning.state.state_nbytes` when the caller knows it.
        """
        self.client_states[client] = state
        self.state_ready[client] = ready
        peak = self.client_state_peak_bytes
        size = state_nbytes(state) if nbytes is None else nbytes
        if size > peak[client]:
            peak[client] = size

    def _run(self, protocol_process: Callable[[Simulation], Process]) -> Process:
        if self.network.handovers is not None:
            self.env.process(self.record_handovers())
        yield from self.public_download()
        yield from protocol_process(self)
        yield from welcome(self, self.new_client_adaptation, self.new_client_epochs)

    def run(self, protocol_process: Callable[[Simulation], Process]) -> None:
        """Run ``protocol_process`` (a server process) to completion.

        Objects built before the run (datasets, client states, thousands of
        client profiles) are frozen out of the cyclic garbage collector while
        the event loop runs: they are long-lived, and rescanning them made
        full collections take half the wall time of a 10,000-client round.
        They are still freed by reference counting, and the collector runs at a
        slower pace (:func:`~mecsim.common.gc_pause.event_loop_gc`).
        """
        with event_loop_gc():
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


class _CellNow:
    """``cells[client]``: the cell serving ``client`` now (rows name the client's cell)."""

    def __init__(self, network: Network) -> None:
        self.network = network

    def __getitem__(self, client: int) -> int:
        return self.network.cell_of(client)
