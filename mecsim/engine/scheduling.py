"""Who a round takes: the scheduling policy on the clock, and what clients report to it.

A mix-in of :class:`~mecsim.engine.simulation.Simulation`. :meth:`Scheduling.select`
hands the policy (:mod:`mecsim.policies.scheduling`) the candidates as the server
knows them now and records its choice, with the score of each client, in the
``decisions`` table. What the server knows (:class:`~mecsim.policies.history.ClientHistory`)
grows as rows are recorded (each transfer's SINR, each row's energy) and as updates
arrive (the client's training loss, its update's norm, how long its job took).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from mecsim.common.rng import numpy_rng
from mecsim.executors import JobResult
from mecsim.learning.state import Payload
from mecsim.net.network import upload_key
from mecsim.policies.history import Candidates, ClientFacts, ClientHistory
from mecsim.policies.scheduling import SchedulingPolicy


class Scheduling:
    """Client scheduling of a :class:`~mecsim.engine.simulation.Simulation` (a mix-in)."""

    def start_scheduling(self, scheduler: SchedulingPolicy) -> None:
        """Use ``scheduler``; keep the history it needs (a policy that reads none, like
        ``uniform``, costs nothing per row)."""
        self.scheduler = scheduler
        self.history = ClientHistory(len(self.clients)) if scheduler.needs_history else None
        self.recorder.history = self.history
        if self.history is not None:
            self.bulk_rounds = False  # bulk rounds record no per-row reports
        self._jobs_begun: dict[int, tuple[float, float, float]] = {}
        """Per client: when its job began, and the loss and update norm it will report."""

    @functools.cached_property
    def client_facts(self) -> ClientFacts:
        """What the server knows of every client before the run (built at the first
        choice that asks: a run whose rounds take every client never does)."""
        flops = self.device_arrays["flops_per_s"]  # type: ignore[attr-defined]
        return ClientFacts(np.asarray(self.num_samples, dtype=np.int64), flops)

    def select(
        self, round_: int, candidates: Sequence[int] | None = None, k: int | None = None
    ) -> list[int]:
        """``k`` clients (default: clients per round) for ``round_``, sorted, as the
        scheduling policy chooses from the candidates.

        ``candidates`` restricts the choice (e.g. to idle clients); offline
        clients (``faults.availability``) and new clients (:attr:`trainers`) are never chosen.
        """
        pool = list(self.trainers) if candidates is None else sorted(candidates)
        pool = [c for c in pool if c in self.trainers]
        if self.faults is not None:
            pool = [c for c in pool if self.faults.online(c, self.env.now)]
        k = self.clients_per_round if k is None else k
        if k >= len(pool):
            chosen, scores = pool, [math.nan] * len(pool)
        else:
            view = self._view(round_, pool)
            selection = self.scheduler.select(view, k, numpy_rng(self.seed, "selection", round_))
            chosen, scores = selection.ids, selection.scores
        self.recorder.decide(round_, self.env.now, chosen, scores)
        if self.history is not None:
            self.history.selected(round_, chosen)
        return chosen

    def _view(self, round_: int, pool: list[int]) -> Candidates:
        if self.history is not None:
            view = self.history.view(round_, self.env.now, pool, self.client_facts)
        else:
            ids = np.asarray(pool, np.int64)
            view = Candidates.known(round_, self.env.now, ids, self.client_facts)
        if self.scheduler.settings.channel == "pilot":
            view = self._piloted(view)
        return view

    def _piloted(self, view: Candidates) -> Candidates:
        """``view`` with each candidate's channel as a pilot measures it now: ``snr_db``
        the SNR its round's upload starts with (the fading holds from the decision into
        the upload's first block), ``mean_snr_db`` its SNR without fading."""
        key = upload_key(view.round, 0)
        measured = [self.network.pilot_snr_db(int(c), key) for c in view.ids]  # type: ignore[attr-defined]
        snr, mean = np.array(measured, dtype=float).reshape(-1, 2).T
        return replace(view, snr_db=snr, mean_snr_db=mean)

    def job_begun(self, client: int, payload: Payload | None, result: JobResult) -> None:
        """A job of ``client`` started now from ``payload``: what it will report with its
        update (its trained tasks' mean loss, its update's norm) waits for the update to
        arrive. A resume's replay finds the reports the run logged (its jobs train nothing)."""
        if self.history is None:
            return
        reports = result.reports
        if "loss" not in reports:
            losses = [v for v in result.task_loss.values() if not math.isnan(v)]
            reports["loss"] = sum(losses) / len(losses) if losses else math.nan
        if "norm" not in reports:
            needed = self.scheduler.reports_norm and result.upload is not None
            reports["norm"] = update_norm(result.upload, payload) if needed else math.nan
        self._jobs_begun[client] = (self.env.now, reports["loss"], reports["norm"])

    def update_arrived(self, round_: int, client: int) -> None:
        """An update of ``client`` reached the server: its report joins the history."""
        if self.history is None or client not in self._jobs_begun:
            return
        began, loss, norm = self._jobs_begun.pop(client)
        self.history.update(round_, client, loss, norm, self.env.now - began)


def update_norm(upload: Payload, start: Payload | None) -> float:
    """The L2 norm of what an upload changed: each entry less the same entry of the
    payload the job started from (an entry it did not start from counts whole)."""
    total = 0.0
    for name, value in upload.items():
        before = None if start is None else start.get(name)
        if before is not None and before.shape == value.shape:
            value = value.float() - before.float()
        total += float(torch.linalg.vector_norm(value.float())) ** 2
    return math.sqrt(total)
