"""The engine alone: Simulation and protocols with a stub algorithm, network and executor."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mecsim.algorithms.aggregate import weighted_average
from mecsim.algorithms.base import Algorithm, Task
from mecsim.engine.evaluation import Evaluation
from mecsim.engine.simulation import Simulation
from mecsim.executors import JobResult
from mecsim.learning.devices import DeviceProfile
from mecsim.net.network import ClientProfile, Network
from mecsim.net.settings import NetworkConfig
from mecsim.protocols import PROTOCOLS
from mecsim.protocols.asynchronous import FedAsyncSettings, FedBuffSettings
from mecsim.protocols.synchronous import ComputeAndWaitSettings, DeadlineSettings

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
            JobResult(j.client, {}, {"w": torch.zeros(4)}, {"work": FLOPS[j.client]}) for j in jobs
        ]


PAYLOAD_BITS = 128  # every stub payload is 4 float32 values


def closed_form_network(count: int = 3) -> Network:
    """The real network at 1 bit/s/Hz: a transfer takes bits / bandwidth, exactly."""
    config = NetworkConfig(
        spectral_efficiency=1.0, downlink={"bandwidth_mhz": PAYLOAD_BITS / DOWN_S / 1e6}
    )
    return Network(config, clients(count), seed=0)


def clients(count: int = 3) -> list[ClientProfile]:
    return [ClientProfile(c, 100.0, PAYLOAD_BITS / UP_S[c], 20.0, DEVICE) for c in range(count)]


class StubEvaluator:
    def evaluate(self, *args):
        return Evaluation(math.nan, math.nan, math.nan, ())


def simulation(protocol) -> Simulation:
    return Simulation(
        algorithm=StubAlgorithm(),
        executor=StubExecutor(),
        network=closed_form_network(3),
        clients=clients(3),
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

    uploads = events[events["phase"] == "upload"].set_index(["job", "client"])["t_end"]
    for _, row in rounds.iterrows():
        assert row["t_end"] >= uploads.loc[(row["job"], row["applied_client"])] - 1e-12
    # never more than `concurrency` clients computing at once
    compute = events[events["phase"] == "compute:work"]
    for t in compute["t_start"]:
        running = compute[(compute["t_start"] <= t) & (compute["t_end"] > t)]
        assert len(running) <= 2


class DeltaAlgorithm(StubAlgorithm):
    """Server state ``w`` (4 entries); aggregation is the per-key weighted average."""

    def init_server_state(self):
        return {"w": torch.zeros(4)}

    def downlink(self, server_state, ctx):
        return {"w": server_state["w"].clone()}

    def aggregate(self, server_state, uploads, ctx):
        return weighted_average(
            [u.payload for u in uploads], [u.aggregation_weight for u in uploads]
        )


STEP = {0: 1.0, 1: 10.0, 2: 100.0}  # what each client's training adds to the model it downloaded


class DeltaExecutor:
    def run(self, jobs):
        return [
            JobResult(
                j.client, {}, {"w": j.payload["w"] + STEP[j.client]}, {"work": FLOPS[j.client]}
            )
            for j in jobs
        ]


def delta_simulation(protocol, count: int = 2) -> Simulation:
    return Simulation(
        algorithm=DeltaAlgorithm(),
        executor=DeltaExecutor(),
        network=closed_form_network(count),
        clients=clients(count),
        indices=[{"train": torch.arange(10)} for _ in range(count)],
        server_device=SERVER,
        evaluator=StubEvaluator(),
        protocol=protocol,
        seed=0,
    )


def test_fedbuff_applies_staleness_weighted_average_deltas_to_the_current_model():
    """Hand example, K = 2, server_lr 0.5, delta weight 1/sqrt(1 + s).

    Client 0 (0.5 s download, 1 s compute, 1 s upload: 2.5 s a job) and
    client 1 (0.5 + 3 + 2 = 5.5 s) start on w0 = 0; a client starts its next
    job on the model current when its upload arrives.

    * 5.0 s: client 0's jobs 1 and 2 (both on w0, deltas 1, staleness 0):
      w1 = 0 + 0.5 * (1 + 1) / 2 = 0.5.
    * 7.5 s: client 1's job 1 (on w0, delta 10) and client 0's job 3 (started
      at 5.0 s on w0, delta 1), both staleness 1:
      w2 = w1 + 0.5 * (10 + 1) / sqrt(2) / 2.
    * 11.0 s: client 0's job 4 (started at 7.5 s on w1 = 0.5: uploads 1.5,
      delta 1) and client 1's job 2 (started at 5.5 s on w1: uploads 10.5,
      delta 10), both staleness 1: w3 = w2 + 0.5 * (1 + 10) / sqrt(2) / 2.
    """
    sim = delta_simulation(FedBuffSettings(rounds=3, buffer_size=2, server_lr=0.5))
    sim.run(PROTOCOLS.get("fedbuff"))
    rounds, events = sim.recorder.rounds(), sim.recorder.events()

    assert rounds["t_start"].tolist() == pytest.approx([0.0, 5.0, 7.5], abs=1e-9)
    assert rounds["arrived_at"].tolist() == pytest.approx([5.0, 7.5, 11.0], abs=1e-9)
    assert rounds["max_staleness"].tolist() == [0, 1, 1]
    expected = 0.5 + 2 * 0.5 * 11 / math.sqrt(2) / 2
    torch.testing.assert_close(sim.server_state["w"], torch.full((4,), expected), atol=1e-6, rtol=0)
    # the buffer aggregation is a timed server computation: 3 FLOPs per delta entry, 1 per model entry
    aggregations = events[(events["client"] == -1) & (events["phase"] == "aggregate")]
    assert aggregations["flops"].tolist() == [3 * 2 * 4 + 4] * 3
    np.testing.assert_allclose(
        aggregations["t_end"] - aggregations["t_start"],
        aggregations["flops"] / SERVER.flops_per_s,
        rtol=1e-4,
    )


@pytest.mark.parametrize(
    "protocol",
    [
        FedAsyncSettings(rounds=6, concurrency=3),
        FedBuffSettings(rounds=3, buffer_size=2, concurrency=3),
        DeadlineSettings(rounds=3, deadline_s=3.0),
    ],
    ids=lambda p: p.kind,
)
def test_t_personal_never_exceeds_the_latest_completion_of_an_evaluated_state(protocol):
    sim = delta_simulation(protocol, count=3)
    sim.run(PROTOCOLS.get(protocol.kind))
    rounds, events = sim.recorder.rounds(), sim.recorder.events()

    computed = events[events["phase"].str.startswith("compute") | (events["phase"] == "aggregate")]
    for _, row in rounds.iterrows():
        done = computed[computed["t_end"] <= row["t_end"] + 1e-12]["t_end"].max()
        assert row["t_personal"] <= done + 1e-12
    # and some state was still being computed when a round ended (the case being tested)
    assert any(((computed["t_start"] < r) & (computed["t_end"] > r)).any() for r in rounds["t_end"])
