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
from typing import Any

import numpy as np
import simpy

from mecsim.algorithms.base import Algorithm, Task, Upload
from mecsim.cost import compute_cost, transmit_cost
from mecsim.devices import DeviceProfile
from mecsim.evaluation import Evaluation, Evaluator
from mecsim.executors import ClientJob, Executor, JobResult
from mecsim.network import ClientProfile, Network, Transfer
from mecsim.recorder import SERVER, Recorder
from mecsim.rng import numpy_rng
from mecsim.scenario import ProtocolConfig
from mecsim.state import Payload, payload_nbytes

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
        train_indices: Sequence[Any],
        server_device: DeviceProfile,
        evaluator: Evaluator,
        protocol: ProtocolConfig,
        seed: int,
        on_round: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.algorithm = algorithm
        self.executor = executor
        self.network = network
        self.clients = list(clients)
        self.train_indices = list(train_indices)
        self.num_samples = [len(i) for i in self.train_indices]
        self.server_device = server_device
        self.evaluator = evaluator
        self.protocol = protocol
        self.seed = seed
        self.on_round = on_round
        self.recorder = Recorder()
        self.server_state = algorithm.init_server_state()
        self.client_states = [algorithm.init_client_state(c.id) for c in self.clients]
        self.last_evaluation: Evaluation | None = None
        self._totals = RoundTotals()
        self._wall_start = time.perf_counter()
        self._train_wall_s = 0.0

    # --- decisions -------------------------------------------------------------------
    def select(self, round_: int) -> list[int]:
        """Clients selected for ``round_`` (sorted), from the selection stream."""
        n = len(self.clients)
        k = self.protocol.clients_per_round or max(1, round(self.protocol.participation * n))
        if k >= n:
            return list(range(n))
        rng = numpy_rng(self.seed, "selection", round_)
        p = None
        if self.protocol.selection == "data_size":
            p = np.asarray(self.num_samples, dtype=float) / sum(self.num_samples)
        return sorted(int(c) for c in rng.choice(n, size=k, replace=False, p=p))

    def payloads(self, selected: Sequence[int]) -> dict[int, Payload | None]:
        """The downlink payload of each selected client (one shared object if broadcast)."""
        if self.algorithm.broadcast:
            shared = self.algorithm.downlink(self.server_state, None)
            return {c: shared for c in selected}
        return {c: self.algorithm.downlink(self.server_state, c) for c in selected}

    def execute(self, round_: int, payloads: dict[int, Payload | None]) -> dict[int, JobResult]:
        """Run the selected clients' jobs now (real work; no simulated time passes)."""
        jobs = [
            ClientJob(c, round_, self.client_states[c], payload, self.train_indices[c])
            for c, payload in payloads.items()
        ]
        started = time.perf_counter()
        results = {r.client: r for r in self.executor.run(jobs)}
        self._train_wall_s += time.perf_counter() - started
        return results

    def downlink_transfers(
        self, round_: int, payloads: dict[int, Payload | None]
    ) -> dict[int, Transfer]:
        """Timing of this round's downlink to each selected client.

        The payload goes out as one broadcast only when the algorithm sends
        the same payload to everyone and ``network.downlink.mode`` is
        ``broadcast``; otherwise each client gets its own unicast copy.
        """
        sizes: dict[int, int] = {}  # by payload identity: a broadcast payload is sized once
        nbytes = {c: sizes.setdefault(id(p), payload_nbytes(p)) for c, p in payloads.items()}
        broadcast = self.algorithm.broadcast and self.network.config.downlink.mode == "broadcast"
        transfers = self.network.downlink(nbytes, round_, broadcast)
        if transfers and any(nbytes.values()):
            on_air = max(t.duration_s for t in transfers.values())
            sent = max(nbytes.values()) if broadcast else sum(nbytes.values())
            self.recorder.event(
                round_,
                SERVER,
                "downlink-send",
                self.env.now,
                self.env.now + on_air,
                nbytes=sent,
                energy_j=self.network.server_tx_power_w * on_air,
            )
        return transfers

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
        """Client runs one task: duration = metered FLOPs / device FLOP/s."""
        seconds, energy = compute_cost(flops, self.clients[client].device)
        start = self.env.now
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
        """Server aggregates: duration = aggregation FLOPs / server FLOP/s."""
        flops = self.algorithm.aggregation_flops(self.server_state, uploads)
        seconds, energy = compute_cost(flops, self.server_device)
        start = self.env.now
        yield self.env.timeout(seconds)
        self.server_state = self.algorithm.aggregate(self.server_state, uploads)
        self.recorder.event(
            round_, SERVER, "aggregate", start, self.env.now, flops=flops, energy_j=energy
        )

    # --- bookkeeping -----------------------------------------------------------------
    def end_round(self, round_: int, round_start: float, selected: Sequence[int]) -> None:
        """Evaluate (every ``eval_every`` rounds and at the end) and record the round row."""
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
            "num_selected": len(selected),
            "generic_acc": evaluation.generic_acc if evaluation else nan,
            "personal_acc": evaluation.personal_acc if evaluation else nan,
            "personal_acc_std": evaluation.personal_acc_std if evaluation else nan,
            "bytes_up": self._totals.bytes_up,
            "bytes_down": self._totals.bytes_down,
            "wall_s": now - self._wall_start,
            "wall_train_s": self._train_wall_s,
        }
        self.recorder.round(**row)
        self._totals = RoundTotals()
        self._wall_start = now
        self._train_wall_s = 0.0
        if self.on_round is not None:
            self.on_round(row)

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
            self.env.process(protocol_process(self))
            self.env.run()
        finally:
            gc.unfreeze()
