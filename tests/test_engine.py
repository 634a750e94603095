"""The engine alone: Simulation and protocols with a stub algorithm, network and executor."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from mecsim.algorithms.base import Algorithm, Task

from mecsim.devices import DeviceProfile
from mecsim.evaluation import Evaluation
from mecsim.executors import JobResult
from mecsim.network import ClientProfile, Transfer
from mecsim.protocols import PROTOCOLS
from mecsim.protocols.asynchronous import FedAsyncSettings
from mecsim.protocols.synchronous import ComputeAndWaitSettings, DeadlineSettings
from mecsim.simulation import Simulation

DEVICE = DeviceProfile("stub", flops_per_s=100.0, power_w=2.0)
SERVER = DeviceProfile("stub-server", flops_per_s=1e12, power_w=1.0)
UP_S = {0: 1.0, 1: 2.0, 2: 4.0}  # upload seconds per client
DOWN_S = 0.5
FLOPS = {0: 100, 1: 300, 2: 50}  # client compute FLOPs (1 s, 3 s, 0.5 s)


class StubAlgorithm(Algorithm):
    tasks = (Task("work", model="m", uploads=True),)

    def __init__(self) -> None:  # no models needed
        self.settings = None

    def init_client_state(self, client):
        return {}

    def downlink(self, server_state, ctx):
        return {"w": torch.zeros(4)}

    def aggregate(self, server_state, uploads, ctx):
        return {"seen": server_state.get("seen", []) + [u.client for u in uploads]}

    def aggregation_flops(self, server_state, uploads):
        return 0


class StubExecutor:
    def run(self, jobs):
        return [
            JobResult(j.client, {}, {"w": torch.zeros(2)}, {"work": FLOPS[j.client]}) for j in jobs
        ]


@dataclass
class _Downlink:
    mode: str = "broadcast"


@dataclass
class _Config:
    downlink: _Downlink


class StubNetwork:
    config = _Config(_Downlink())
    server_tx_power_w = 1.0

    def downlink(self, nbytes, round_, broadcast):
        return {c: Transfer(c, n, DOWN_S, 8 * n / DOWN_S, 0.0) for c, n in nbytes.items()}

    def uplink(self, client, nbytes, round_):
        return Transfer(client, nbytes, UP_S[client], 8 * nbytes / UP_S[client], 0.0)


class StubEvaluator:
    def evaluate(self, *args):
        return Evaluation(math.nan, math.nan, math.nan, ())


def simulation(protocol) -> Simulation:
    return Simulation(
        algorithm=StubAlgorithm(),
        executor=StubExecutor(),
        network=StubNetwork(),
        clients=[ClientProfile(c, 100.0, 1e6, 20.0, DEVICE) for c in range(3)],
        indices=[{"train": torch.arange(10)} for _ in range(3)],
        server_device=SERVER,
        evaluator=StubEvaluator(),
        protocol=protocol,
        seed=0,
    )


def test_compute_and_wait_orders_each_client_and_waits_for_the_last_upload():
    sim = simulation(ComputeAndWaitSettings(rounds=2))
    sim.run(PROTOCOLS.get("compute_and_wait"))
    events = sim.recorder.events()

    for c in range(3):
        rows = events[(events["client"] == c) & (events["round"] == 0)].set_index("phase")
        assert rows.loc["download", "t_end"] == pytest.approx(DOWN_S)
        assert rows.loc["compute:work", "t_start"] == pytest.approx(DOWN_S)
        assert rows.loc["compute:work", "t_end"] == pytest.approx(DOWN_S + FLOPS[c] / 100)
        assert rows.loc["upload", "t_start"] == pytest.approx(rows.loc["compute:work", "t_end"])
        assert rows.loc["upload", "t_end"] == pytest.approx(DOWN_S + FLOPS[c] / 100 + UP_S[c])
    slowest = max(DOWN_S + FLOPS[c] / 100 + UP_S[c] for c in range(3))  # client 1: 5.5 s
    aggregate = events[(events["phase"] == "aggregate") & (events["round"] == 0)].iloc[0]
    assert aggregate["t_start"] == pytest.approx(slowest)
    second = events[(events["round"] == 1) & (events["phase"] == "download")]
    assert (second["t_start"] >= slowest).all()  # round 1 starts after round 0's aggregation
    assert sim.server_state["seen"] == [0, 1, 2, 0, 1, 2]


def test_deadline_aggregates_what_arrived_and_never_selects_a_busy_client():
    sim = simulation(DeadlineSettings(rounds=3, deadline_s=3.0))
    sim.run(PROTOCOLS.get("deadline"))
    events, rounds = sim.recorder.events(), sim.recorder.rounds()

    # round 0 ends at 2.5 s (client 0), 5.5 s (client 1), 5.0 s (client 2): only 0 is on time
    arrived = events[(events["phase"] == "upload") & (events["t_end"] <= 3.0)]
    assert set(arrived["client"]) == {0}
    assert rounds.loc[0, "on_time"] == 1 and rounds.loc[0, "late"] == 2
    for r in range(1, 3):  # a client still working on an earlier round is not selected
        starts = events[(events["round"] == r) & (events["phase"] == "download")]
        for _, row in starts.iterrows():
            earlier = events[(events["client"] == row["client"]) & (events["round"] < r)]
            assert (earlier["t_end"] <= row["t_start"] + 1e-9).all()


def test_fedasync_applies_each_update_after_its_upload_arrived():
    sim = simulation(FedAsyncSettings(rounds=5, concurrency=2))
    sim.run(PROTOCOLS.get("fedasync"))
    events, rounds = sim.recorder.events(), sim.recorder.rounds()

    uploads = events[events["phase"] == "upload"].set_index(["round", "client"])["t_end"]
    for _, row in rounds.iterrows():
        assert row["t_end"] >= uploads.loc[(row["job"], row["applied_client"])] - 1e-12
    # never more than `concurrency` clients computing at once
    compute = events[events["phase"] == "compute:work"]
    for t in compute["t_start"]:
        running = compute[(compute["t_start"] <= t) & (compute["t_end"] > t)]
        assert len(running) <= 2
