"""Bulk compute-and-wait rounds (mecsim.protocols.bulk) give the per-client processes' tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import simpy
import torch
from hypothesis import given
from hypothesis import strategies as st

import mecsim
import mecsim.protocols.bulk as bulk
import mecsim.protocols.synchronous as synchronous
from mecsim.algorithms.base import Task
from mecsim.channels.sharing import SharedTransmitter, Transmission
from mecsim.engine.recorder import EVENT_COLUMNS, Recorder
from mecsim.engine.simulation import Simulation
from mecsim.executors import JobResult
from mecsim.learning.cost import StepMeter
from mecsim.learning.devices import DeviceProfile
from mecsim.net.network import ClientProfile, Network
from mecsim.net.settings import NetworkConfig
from mecsim.protocols import PROTOCOLS
from mecsim.protocols.synchronous import ComputeAndWaitSettings
from tests.engine.test_engine import StubAlgorithm, StubEvaluator, StubExecutor


@pytest.fixture
def spy(monkeypatch):
    """Counts bulk rounds and, among them, rounds ordered by replaying SimPy's queue."""
    calls = {"bulk": 0, "replay": 0}
    rounds, replay = bulk.compute_and_wait_clients, bulk._replay_order

    def counted_round(*args, **kwargs):
        calls["bulk"] += 1
        return (yield from rounds(*args, **kwargs))

    def counted_replay(*args, **kwargs):
        calls["replay"] += 1
        return replay(*args, **kwargs)

    monkeypatch.setattr(synchronous, "compute_and_wait_clients", counted_round)
    monkeypatch.setattr(bulk, "_replay_order", counted_replay)
    return calls


def run_both(overrides: dict) -> tuple:
    """The quickstart with ``overrides``, per-client processes then bulk rounds."""
    out = []
    for flag in (False, True):
        settings = {**overrides, "execution.bulk_rounds": flag}
        out.append(mecsim.run("scenarios/quickstart.toml", settings, write=False, progress=False))
    return out[0], out[1]


def assert_same_tables(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    columns = [c for c in a.rounds.columns if not c.startswith("wall")]
    pd.testing.assert_frame_equal(a.rounds[columns], b.rounds[columns], check_exact=True)


COST_ONLY_1000 = {
    "execution.cost_only": True,
    "clients.count": 1000,
    "clients.num_samples": {"dist": "uniform", "low": 20, "high": 200},
    "protocol.rounds": 2,
}


def test_bulk_rounds_give_identical_tables_at_1000_clients(spy):
    """Random attributes: no two events share a time, so time order is SimPy's order."""
    per_client, in_bulk = run_both(COST_ONLY_1000)
    assert spy == {"bulk": 2, "replay": 0}
    assert len(in_bulk.events) == 2 * (1 + 3 * 1000) + 2  # send, 3 per client, aggregate
    assert_same_tables(per_client, in_bulk)


def test_bulk_rounds_replay_simpys_queue_when_events_tie(spy):
    """Identical clients, two tasks, partial participation, the worst-rate broadcast."""
    identical = {
        "clients.distance_m": 200.0,
        "clients.bandwidth_mhz": {"dist": "choice", "values": [10, 20]},
        "clients.tx_power_dbm": 25.0,
        "clients.device": {"dist": "choice", "values": ["phone-mid", "iot-low"]},
        "clients.num_samples": {"dist": "choice", "values": [50, 100]},
        "network.spectral_efficiency": 1.0,
        "network.downlink.broadcast_rate": "worst",
        "algorithm.name": "ditto",
        "protocol.participation": 0.5,
    }
    per_client, in_bulk = run_both({**COST_ONLY_1000, **identical})
    assert spy == {"bulk": 2, "replay": 2}
    assert (in_bulk.events["t_end"].duplicated()).sum() > 1000  # the ties are real
    assert_same_tables(per_client, in_bulk)


def test_rounds_after_the_public_broadcast_run_in_bulk(spy):
    """The radio's state is advanced to the round's start before asking whether it is busy
    (it had kept the finished public broadcast as active, so no round ran in bulk)."""
    public = {"clients.count": 200, "algorithm.name": "feddf", "data.public_size": 100}
    per_client, in_bulk = run_both({**COST_ONLY_1000, **public})
    assert spy["bulk"] == 2
    assert (in_bulk.events["phase"] == "download:public").sum() == 200
    assert_same_tables(per_client, in_bulk)


def test_quickstart_with_training_runs_in_bulk_and_is_unchanged(spy):
    per_client, in_bulk = run_both({"protocol.rounds": 3})
    assert spy["bulk"] == 3
    assert_same_tables(per_client, in_bulk)
    assert in_bulk.rounds["generic_acc"].tolist() == per_client.rounds["generic_acc"].tolist()


@pytest.mark.parametrize(
    "overrides",
    [
        {"network.fading": "rayleigh"},
        {"network.max_transfer_s": 100.0},
        {"network.uplink.total_bandwidth_mhz": 100.0},
        {"network.downlink.mode": "unicast"},
    ],
)
def test_rounds_the_closed_forms_do_not_cover_run_per_client(spy, overrides):
    mecsim.run(
        "scenarios/quickstart.toml",
        {**COST_ONLY_1000, "clients.count": 20, "protocol.rounds": 1, **overrides},
        write=False,
        progress=False,
    )
    assert spy["bulk"] == 0


# --- the engine alone ------------------------------------------------------------------
def stub_simulation(clients: list[ClientProfile], network: Network, flag: bool) -> Simulation:
    return Simulation(
        algorithm=StubAlgorithm(),
        executor=StubExecutor(),
        network=network,
        clients=clients,
        indices=[{"train": torch.arange(10)} for _ in clients],
        server_device=DeviceProfile("server", 1e12, 1.0),
        evaluator=StubEvaluator(),
        protocol=ComputeAndWaitSettings(rounds=3),
        seed=0,
        bulk_rounds=flag,
    )


@pytest.mark.parametrize("same", [False, True])
def test_stub_engine_bulk_equals_processes(spy, same):
    """Three stub clients (1 bit/s/Hz links), distinct or all alike (every event ties)."""
    device = DeviceProfile("stub", flops_per_s=100.0, power_w=2.0, rx_power_w=0.5)
    bandwidth = [64.0, 64.0, 64.0] if same else [128.0, 64.0, 32.0]
    profiles = [ClientProfile(c, 100.0, bandwidth[c], 20.0, device) for c in range(3)]
    config = NetworkConfig(spectral_efficiency=1.0, downlink={"bandwidth_mhz": 256e-6})
    tables = []
    for flag in (False, True):
        sim = stub_simulation(profiles, Network(config, profiles, seed=0), flag)
        sim.run(PROTOCOLS.get("compute_and_wait"))
        tables.append((sim.recorder.events(), sim.recorder.rounds(), sim.busy_until))
    pd.testing.assert_frame_equal(tables[0][0], tables[1][0], check_exact=True)
    assert tables[0][1]["t_end"].tolist() == tables[1][1]["t_end"].tolist()
    assert tables[0][2] == tables[1][2]
    assert spy["bulk"] == 3
    # hand calculation: 128 bits down at 256 bit/s, 100 FLOPs at 100 FLOP/s, 128 bits up
    events = tables[1][0]
    first = events[(events["round"] == 0) & (events["client"] == 1)].set_index("phase")
    assert first.loc["download", "t_end"] == 0.5
    assert first.loc["compute:work", "t_end"] == 0.5 + 3.0
    assert first.loc["upload", "t_end"] == 0.5 + 3.0 + 128 / bandwidth[1]


class TwoTaskAlgorithm(StubAlgorithm):
    tasks = (Task("a", model="m"), Task("b", model="m", uploads=True))


class TwoTaskExecutor:
    FLOPS = {0: (50, 50), 1: (150, 150), 2: (100, 100)}  # at 100 FLOP/s

    def run(self, jobs):
        return [
            JobResult(j.client, {}, {"w": torch.zeros(4)}, dict(zip("ab", flops, strict=True)))
            for j in jobs
            for flops in [self.FLOPS[j.client]]
        ]


def test_stub_engine_bulk_orders_tied_events_by_when_simpy_scheduled_them(spy):
    """Client 0's upload and client 1's second task both end at 3.5 s; the upload was
    scheduled first (at 1.5 s, the task at 2.0 s), so SimPy records it first."""
    device = DeviceProfile("stub", flops_per_s=100.0, power_w=2.0)
    profiles = [ClientProfile(c, 100.0, [64.0, 128.0, 32.0][c], 20.0, device) for c in range(3)]
    config = NetworkConfig(spectral_efficiency=1.0, downlink={"bandwidth_mhz": 256e-6})
    tables = []
    for flag in (False, True):
        sim = stub_simulation(profiles, Network(config, profiles, seed=0), flag)
        sim.algorithm, sim.executor = TwoTaskAlgorithm(), TwoTaskExecutor()
        sim.run(PROTOCOLS.get("compute_and_wait"))
        tables.append(sim.recorder.events())
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=True)
    assert spy == {"bulk": 3, "replay": 3}
    at = tables[1][(tables[1]["t_end"] == 3.5) & (tables[1]["round"] == 0)]
    assert list(zip(at["client"], at["phase"], strict=True)) == [(0, "upload"), (1, "compute:b")]


def random_network(n: int, seed: int, **config) -> Network:
    rng = np.random.default_rng(seed)
    device = DeviceProfile("stub", 1e9, 1.0)
    profiles = [
        ClientProfile(
            c,
            float(rng.uniform(50, 500)),
            float(rng.uniform(1e6, 2e7)),
            float(rng.uniform(10, 30)),
            device,
        )
        for c in range(n)
    ]
    return Network(NetworkConfig(**config), profiles, seed=0)


@pytest.mark.parametrize("worst", [False, True])
def test_closed_form_broadcast_is_the_engines_forecast_bit_for_bit(worst):
    network = random_network(
        50, seed=1, downlink={"broadcast_rate": "worst" if worst else "rateless"}
    )
    network.bind(simpy.Environment())
    ids = list(range(50))
    deliveries, (sent,) = network.downlink(dict.fromkeys(ids, 12345), ("round", 0), True)
    closed = network.closed_form_broadcast(ids, 12345, 0.0)
    engine = [deliveries[c] for c in ids]
    assert closed.end.tolist() == [d.predicted_end for d in engine]
    twin = network._server.forecast(sent.transmission)
    assert network.server_tx_power_w / 1 * float(closed.step[0]) == twin.energy_j
    forecasts = [network._server.forecast(d.reception) for d in engine]
    assert closed.mean_sinr_db.tolist() == [r.mean_sinr_db for r in forecasts]
    assert closed.effective_rate_bps.tolist() == [r.effective_rate_bps for r in forecasts]


def test_closed_form_uploads_are_the_engines_bit_for_bit():
    network = random_network(40, seed=2)
    starts = np.random.default_rng(3).uniform(0, 1e3, 40)
    nbytes = np.arange(1, 41, dtype=np.int64) * 1000
    closed = network.closed_form_uploads(np.arange(40), nbytes, starts)
    for c in range(40):
        profile = network.clients[c]
        reception = network._reception("up", c, int(nbytes[c]), ("job", 0, 0))
        transmitter = SharedTransmitter(profile.bandwidth_hz, profile.tx_power_w)
        transmitter.now = float(starts[c])
        transmitter.start(Transmission([reception]))
        transmitter.advance(math.inf)
        assert closed.end[c] == reception.end
        assert closed.mean_sinr_db[c] == reception.mean_sinr_db
        assert closed.effective_rate_bps[c] == reception.effective_rate_bps


def test_closed_forms_refuse_links_in_outage():
    network = random_network(5, seed=4, min_snr_db=100.0, max_transfer_s=1.0)
    assert network.closed_form_broadcast(range(5), 100, 0.0) is None
    assert network.closed_form_blocker() == "network.max_transfer_s"


@given(
    st.floats(0, 1e9, allow_nan=False, allow_infinity=False),
    st.floats(0, 1e9, allow_nan=False, allow_infinity=False),
)
def test_delay_to_lands_the_clock_exactly(now, later):
    t = now + later
    assert now + bulk._delay_to(now, t) == t


def test_recorder_keeps_single_rows_and_column_blocks_in_arrival_order():
    recorder = Recorder()
    recorder.event(0, 1, "download", 0.0, 1.0, nbytes=5)
    columns = {name: np.zeros(2, dtype=np.int64) for name in EVENT_COLUMNS}
    columns.update(
        phase=np.array(["upload", "upload"], dtype=object),
        direction=np.array(["up", "up"], dtype=object),
        role=np.array(["sender", "sender"], dtype=object),
        t_start=np.array([1.0, 2.0]),
        t_end=np.array([2.0, 3.0]),
        energy_j=np.array([0.5, 0.25]),
        rate_bps=np.array([1.0, 2.0]),
        snr_db=np.array([3.0, 4.0]),
        client=np.array([1, 2]),
    )
    recorder.extend(columns)
    recorder.event(0, -1, "aggregate", 3.0, 4.0)
    events = recorder.events()
    assert len(recorder) == 4
    assert events["phase"].tolist() == ["download", "upload", "upload", "aggregate"]
    assert events["client"].tolist() == [1, 1, 2, -1]
    assert events["job"].tolist() == [0, 0, 0, -1]
    single = Recorder()
    single.event(0, 1, "upload", 1.0, 2.0, direction="up", role="sender", rate_bps=1.0)
    assert events.dtypes.to_dict() == single.events().dtypes.to_dict()


def test_recorder_tables_are_independent_of_its_cache_and_rows_keep_arriving():
    recorder = Recorder()
    recorder.event(0, 1, "download", 0.0, 1.0, nbytes=5)
    first = recorder.events()
    first.loc[0, "bytes"] = 999  # a caller's edits stay in the caller's frame
    first["extra"] = 1
    recorder.event(0, 2, "upload", 1.0, 2.0, nbytes=7)  # after the table was built once
    again = recorder.events()
    assert again["bytes"].tolist() == [5, 7] and "extra" not in again
    assert recorder.rounds().empty and len(recorder) == 2


def test_a_small_step_counted_on_cpu_zeros_equals_the_meta_count(monkeypatch):
    """Cost-only FLOPs: the CPU shortcut for small steps counts what the meta device does."""
    from algorithms.losses import cross_entropy_loss
    from mecsim.learning import cost
    from mecsim.learning.models.registry import build_model
    from mecsim.learning.state import ModelState
    from mecsim.learning.training import ModelFunction

    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    state = ModelState.of(model).to("meta")
    function = ModelFunction(model.to("meta"))
    shapes = {"train": (16, 1, 8, 8)}
    counts = []
    for limit in (cost.SMALL_STEP_ELEMENTS, 0):  # CPU zeros, then the meta device
        monkeypatch.setattr(cost, "SMALL_STEP_ELEMENTS", limit)
        loss = cross_entropy_loss()
        counts.append(StepMeter().step_flops("k", function, loss, state, {}, shapes, None))
    assert counts[0] == counts[1] > 0


def test_reception_closed_form_matches_hand_calculation():
    """1 bit/s/Hz: a 1,000-byte upload on 1 MHz takes 8 ms."""
    device = DeviceProfile("stub", 1e9, 1.0)
    profile = ClientProfile(0, 100.0, 1e6, 20.0, device)
    network = Network(NetworkConfig(spectral_efficiency=1.0), [profile], seed=0)
    closed = network.closed_form_uploads(np.array([0]), np.array([1000]), np.array([2.0]))
    assert closed.end[0] == pytest.approx(2.008, abs=1e-12)
    assert closed.effective_rate_bps[0] == pytest.approx(1e6)
