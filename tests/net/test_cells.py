"""Several cells: positions, association, per-cell radios, and interference between cells."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
import simpy

import mecsim
from mecsim.channels import LogDistancePathLoss, dbm_to_w
from mecsim.learning.devices import DEVICES
from mecsim.net.geometry import Cell, associate, distances
from mecsim.net.network import ClientProfile, Network
from mecsim.net.settings import NetworkConfig

FAST = ["algorithm.steps=2", "protocol.rounds=2"]
TWO_CELLS = {"cells": [{"x_m": 0.0, "y_m": 0.0}, {"x_m": 1000.0, "y_m": 0.0}]}


def placed(tiny: dict, positions: list[tuple[float, float]], tmp_path, **network) -> dict:
    """The tiny scenario with clients at ``positions`` (a client table) and ``network``."""
    table = tmp_path / "clients.csv"
    pd.DataFrame({"x_m": [p[0] for p in positions], "y_m": [p[1] for p in positions]}).to_csv(
        table, index=False
    )
    scenario = copy.deepcopy(tiny)
    scenario["clients"] = {**scenario.get("clients", {}), "table": str(table)}
    scenario["clients"].pop("count", None)
    scenario["network"] = {**scenario.get("network", {}), **network}
    return scenario


def test_one_cell_with_clients_placed_at_distance_d_reproduces_the_distance_run(tiny, tmp_path):
    distances_m = [150.0, 220.0, 310.0, 480.0]
    by_distance = tmp_path / "distance.csv"
    pd.DataFrame({"distance_m": distances_m}).to_csv(by_distance, index=False)
    plain = copy.deepcopy(tiny)
    plain["clients"] = {**plain.get("clients", {}), "table": str(by_distance)}
    plain["clients"].pop("count", None)
    (tmp_path / "p").mkdir()
    positioned = placed(tiny, [(d, 0.0) for d in distances_m], tmp_path / "p",
                        cells=[{"x_m": 0.0, "y_m": 0.0}])  # fmt: skip

    a = mecsim.run(plain, FAST, write=False)
    b = mecsim.run(positioned, FAST, write=False)
    pd.testing.assert_frame_equal(a.events, b.events)
    timed = [c for c in a.rounds if c.startswith("wall")]  # host wall-clock seconds
    pd.testing.assert_frame_equal(a.rounds.drop(columns=timed), b.rounds.drop(columns=timed))
    assert b.clients["distance_m"].tolist() == distances_m
    assert b.clients["cell"].tolist() == [0, 0, 0, 0]
    assert "cell" not in b.events  # one cell: the events table as before


def test_clients_associate_with_the_strongest_cell():
    cells = [Cell(0, 0.0, 0.0, 1e6, 1.0, "edge"), Cell(1, 1000.0, 0.0, 1e6, 1.0, "edge")]
    pathloss = LogDistancePathLoss(-40.0, 1.0, 4.0)
    x, y = np.array([100.0, 499.0, 501.0, 900.0]), np.zeros(4)
    to_cells = distances(x, y, cells)
    assert to_cells[:, 1].tolist() == [900.0, 501.0, 499.0, 100.0]
    assert associate(to_cells, cells, pathloss).tolist() == [0, 0, 1, 1]
    # a cell 16x stronger (12 dB) wins out to twice the distance at exponent 4
    loud = [cells[0], Cell(1, 1000.0, 0.0, 1e6, 16.0, "edge")]
    assert associate(distances(np.array([340.0, 330.0]), np.zeros(2), loud), loud,
                     pathloss).tolist() == [1, 0]  # fmt: skip


def test_each_cell_broadcasts_to_its_own_clients(tiny, tmp_path):
    positions = [(100.0, 0.0), (300.0, 50.0), (900.0, 0.0), (700.0, -50.0)]
    result = mecsim.run(placed(tiny, positions, tmp_path, **TWO_CELLS), FAST, write=False)
    events, clients = result.events, result.clients
    assert clients["cell"].tolist() == [0, 0, 1, 1]
    sends = events[events["phase"] == "downlink-send"]
    assert sorted(sends.groupby("round")["cell"].apply(sorted).sum()) == [0, 0, 1, 1]
    client_rows = events[events["client"] >= 0]
    assert (client_rows["cell"] == clients["cell"].to_numpy()[client_rows["client"]]).all()
    assert (events.loc[events["phase"] == "aggregate", "cell"] == -1).all()


def two_cell_network(nbytes: int = 10**6) -> tuple[Network, list[ClientProfile]]:
    """Two cells 1 km apart, a client 200 m from each toward the other, equal bands."""
    config = NetworkConfig(**TWO_CELLS, spectral_efficiency=None)
    cells = [
        Cell(i, c.x_m, c.y_m, 50e6, float(dbm_to_w(30.0)), "edge-server")
        for i, c in enumerate(config.cells)
    ]
    device = DEVICES.get("phone-mid")
    clients = [
        ClientProfile(0, 200.0, 10e6, 23.0, device, cell=0, x_m=200.0, y_m=0.0),
        ClientProfile(1, 200.0, 10e6, 23.0, device, cell=1, x_m=800.0, y_m=0.0),
    ]
    return Network(config, clients, seed=0, cells=cells), clients


def shannon(band: float, signal_w: float, interference_w: float) -> float:
    noise = float(dbm_to_w(-174.0)) * band
    return band * math.log2(1 + signal_w / (noise + interference_w))


def test_uploads_in_two_cells_slow_each_other_by_the_closed_form():
    network, clients = two_cell_network()
    env = simpy.Environment()
    network.bind(env)
    done = {}

    def send(client: int, nbytes: int):
        _, reception = yield from network.upload(client, nbytes, ("job", 0, 0))
        done[client] = reception

    env.process(send(0, 10**6))
    env.process(send(1, 3 * 10**6))
    env.run()

    gain = LogDistancePathLoss(-40.0, 1.0, 4.0).gain
    power = clients[0].tx_power_w
    shared = shannon(10e6, power * gain(200.0), power * gain(800.0))
    alone = shannon(10e6, power * gain(200.0), 0.0)
    first = 8e6 / shared
    assert done[0].end == pytest.approx(first, rel=1e-12)
    assert done[1].end == pytest.approx(first + (24e6 - shared * first) / alone, rel=1e-12)
    sinr = power * gain(200.0) / (float(dbm_to_w(-174.0)) * 10e6 + power * gain(800.0))
    assert done[0].mean_sinr_db == pytest.approx(10 * math.log10(sinr), rel=1e-12)


def test_downlinks_of_neighbouring_cells_interfere_while_both_are_on_the_air():
    network, clients = two_cell_network()
    env = simpy.Environment()
    network.bind(env)
    deliveries, _ = network.downlink({0: 10**6, 1: 10**6}, ("round", 0), broadcast=True)
    env.run()
    gain = LogDistancePathLoss(-40.0, 1.0, 4.0).gain
    power = float(dbm_to_w(30.0))
    # each client hears its own cell at 200 m and the other cell at 800 m, full band each
    shared = shannon(50e6, power * gain(200.0), power * gain(800.0))
    for delivery in deliveries.values():
        reception = delivery.done.value
        assert reception.end == pytest.approx(8e6 / shared, rel=1e-12)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["network.cells=[{x_m=0, y_m=0}, {x_m=500, y_m=0}]"], "network.cells"),
        (["clients.x_m=100"], "clients"),
        (["clients.x_m=100", "clients.y_m=0", "clients.distance_m=100"], "clients"),
        (['network.cells=[{x_m=0, y_m=0, device="warp-drive"}]', "clients.x_m=100",
          "clients.y_m=0"], "network.cells.0.device"),
        (["network.cells=[{x_m=0, y_m=0}]", "clients.x_m=0", "clients.y_m=0"], "clients.x_m"),
        (["network.frequency_reuse=0"], "network.frequency_reuse"),
    ],
)  # fmt: skip
def test_bad_cell_settings_are_refused_in_one_line(tiny, refused, overrides, field):
    refused(tiny, overrides, field)


SPREAD = [
    "network.cells=[{x_m=0, y_m=0}, {x_m=1000, y_m=0}]",
    'clients.x_m={dist="uniform", low=-300, high=1300}',
    "clients.y_m=0",
    "clients.count=6",
]


@pytest.mark.parametrize("kind", ["compute_and_wait", "fedasync"])
def test_a_multicell_run_resumes_like_an_uninterrupted_one(kind):
    from mecsim.commands.conformance import resume_problems

    settings = [*SPREAD, f"protocol.kind={kind}", "protocol.rounds=4", "protocol.concurrency=3"]
    assert resume_problems(settings if kind == "fedasync" else settings[:-1]) == []


def test_serial_batched_and_cost_only_agree_with_several_cells(tiny):
    serial = mecsim.run(tiny, [*FAST, *SPREAD], executor="serial", write=False)
    batched = mecsim.run(tiny, [*FAST, *SPREAD], executor="batched", write=False)
    dry = mecsim.run(tiny, [*FAST, *SPREAD, "execution.cost_only=true"], write=False)
    pd.testing.assert_frame_equal(serial.events, batched.events)
    pd.testing.assert_frame_equal(serial.events, dry.events)
    assert "cell" in serial.events and set(serial.events["cell"]) == {-1, 0, 1}


def test_each_cell_grants_its_own_finite_uplink_band(tiny, tmp_path):
    # three clients near cell 0 and one near cell 1; each cell's band fits one upload
    scenario = placed(tiny, [(100.0, 0.0), (110.0, 0.0), (120.0, 0.0), (900.0, 0.0)], tmp_path,
                      **TWO_CELLS)  # fmt: skip
    settings = [*FAST, "execution.cost_only=true", "clients.num_samples=50",
                "clients.bandwidth_mhz=10", "clients.device=phone-mid",
                "network.uplink.total_bandwidth_mhz=10"]  # fmt: skip
    events = mecsim.run(scenario, settings, write=False).events
    waits = events[events["phase"] == "wait:spectrum"]
    uploads = events[events["phase"] == "upload"]
    assert set(waits["cell"]) == {0} and len(waits) == 2 * 2  # two of three wait, 2 rounds
    for _, rows in uploads.groupby(["round", "cell"]):  # one upload at a time per cell
        ordered = rows.sort_values("t_start")
        assert (ordered["t_start"].to_numpy()[1:] >= ordered["t_end"].to_numpy()[:-1] - 1e-12).all()
    assert set(uploads["cell"]) == {0, 1}
