"""What the server knows of its clients when it decides: their reports so far.

A client reports the SINR of each transfer when it ends (the base station measures
uploads; a download's receiver feeds its SINR back), and its training loss, update
norm and energy spent with each update the server receives. The server itself knows
when it last chose each client and when each client's last update arrived.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np


class ClientHistory:
    """Per client (by id): the reports the server has received so far."""

    def __init__(self, num_clients: int) -> None:
        n = num_clients
        self.snr_db = np.full(n, np.nan)
        """The SINR of its last finished transfer, dB (NaN: none yet)."""
        self.snr_sum = np.zeros(n)
        """The sum of its reported SINRs, linear (their mean: ``snr_sum / reports``)."""
        self.reports = np.zeros(n, dtype=np.int64)
        self.loss = np.full(n, np.nan)
        """Its last reported mean training loss (NaN: none yet)."""
        self.update_norm = np.full(n, np.nan)
        """The L2 norm of its last update (upload minus the model it started from)."""
        self.energy_j = np.zeros(n)
        """Energy it has spent so far, by the rows recorded up to now."""
        self.job_s = np.full(n, np.nan)
        """How long its last job took, from its first row to its update's arrival."""
        self.last_selected = np.full(n, -1, dtype=np.int64)
        self.times_selected = np.zeros(n, dtype=np.int64)
        self.last_update = np.full(n, -1, dtype=np.int64)
        """The round whose aggregation last took an update of it (-1: never)."""

    def transfer(self, client: int, snr_db: float) -> None:
        """A transfer of ``client`` ended with mean SINR ``snr_db``."""
        if math.isnan(snr_db):
            return
        self.snr_db[client] = snr_db
        self.snr_sum[client] += 10 ** (snr_db / 10) if snr_db > -math.inf else 0.0
        self.reports[client] += 1

    def row(self, client: int, joules: float, direction: str, snr_db: float) -> None:
        """A row of ``client`` was recorded: the energy it spent, the SINR it measured."""
        self.energy_j[client] += joules
        if direction != "none":
            self.transfer(client, snr_db)

    def selected(self, round_: int, clients: list[int]) -> None:
        self.last_selected[clients] = round_
        self.times_selected[clients] += 1

    def update(self, round_: int, client: int, loss: float, norm: float, job_s: float) -> None:
        """An update of ``client`` reached the server in ``round_``."""
        self.last_update[client] = round_
        self.loss[client] = loss
        self.update_norm[client] = norm
        self.job_s[client] = job_s

    def view(self, round_: int, now: float, ids: list[int], facts: ClientFacts) -> Candidates:
        """The candidates ``ids`` as the server sees them at ``now``."""
        index = np.asarray(ids, dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = self.snr_sum[index] / self.reports[index]
            mean_db = np.where(self.reports[index] > 0, 10 * np.log10(mean), np.nan)
        return Candidates(
            round=round_,
            now=now,
            ids=index,
            num_samples=facts.num_samples[index],
            flops_per_s=facts.flops_per_s[index],
            snr_db=self.snr_db[index],
            mean_snr_db=mean_db,
            loss=self.loss[index],
            update_norm=self.update_norm[index],
            energy_j=self.energy_j[index],
            job_s=self.job_s[index],
            last_selected=self.last_selected[index],
            times_selected=self.times_selected[index],
            last_update=self.last_update[index],
        )


@dataclass(frozen=True)
class ClientFacts:
    """What the server knows of every client before the run: data size, device speed."""

    num_samples: np.ndarray
    flops_per_s: np.ndarray


@dataclass(frozen=True)
class Candidates:
    """The clients a policy may choose from, as the server knows them now: one array
    entry per candidate, aligned with ``ids`` (ascending)."""

    round: int
    now: float
    ids: np.ndarray
    num_samples: np.ndarray
    flops_per_s: np.ndarray
    snr_db: np.ndarray
    """Last reported SINR, dB (NaN: never reported)."""
    mean_snr_db: np.ndarray
    """Mean of its reported SINRs (linear mean, in dB; NaN: none)."""
    loss: np.ndarray
    update_norm: np.ndarray
    energy_j: np.ndarray
    job_s: np.ndarray
    last_selected: np.ndarray
    times_selected: np.ndarray
    last_update: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def known(cls, round_: int, now: float, ids: np.ndarray, facts: ClientFacts) -> Candidates:
        """The candidates as a server with no reports knows them: data size and device."""
        unknown = np.full(len(ids), np.nan)
        never = np.full(len(ids), -1, dtype=np.int64)
        return cls(
            round=round_,
            now=now,
            ids=ids,
            num_samples=facts.num_samples[ids],
            flops_per_s=facts.flops_per_s[ids],
            snr_db=unknown,
            mean_snr_db=unknown,
            loss=unknown,
            update_norm=unknown,
            energy_j=np.zeros(len(ids)),
            job_s=unknown,
            last_selected=never,
            times_selected=np.zeros(len(ids), dtype=np.int64),
            last_update=never,
        )

    def take(self, positions: np.ndarray) -> Candidates:
        """The candidates at ``positions`` (ascending) only."""
        return replace(
            self,
            **{
                name: value[positions]
                for name, value in vars(self).items()
                if isinstance(value, np.ndarray)
            },
        )
