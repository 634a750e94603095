"""Hierarchical FL (HierFAVG): edge servers per cell, a cloud over the backhaul."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import tomli_w

import mecsim
from mecsim.commands.cli import main
from mecsim.commands.conformance import resume_problems
from mecsim.protocols.hierarchical import aggregates_twice

FAST = ["algorithm.steps=2", "protocol.rounds=2"]
CELLS = [
    "network.cells=[{x_m=0, y_m=0}, {x_m=1000, y_m=0}]",
    'clients.x_m={dist="uniform", low=-300, high=1300}',
    "clients.y_m=0",
    "clients.count=6",
]
WALL = ["wall_s", "wall_train_s"]


def test_one_cell_kappa2_1_is_fedavg_bit_for_bit(tiny):
    fedavg = mecsim.run(tiny, FAST, write=False)
    hier = mecsim.run(tiny, [*FAST, "protocol.kind=hierarchical", "protocol.edge_rounds=1"],
                      write=False)  # fmt: skip
    pd.testing.assert_frame_equal(fedavg.events, hier.events)
    assert hier.rounds["level"].tolist() == ["cloud", "cloud"]
    pd.testing.assert_frame_equal(
        fedavg.rounds.drop(columns=WALL), hier.rounds.drop(columns=[*WALL, "level"])
    )
    for key, value in fedavg.server_state["global"].params.items():
        assert value.equal(hier.server_state["global"].params[key])


def test_cloud_average_of_edge_averages_is_the_flat_weighted_mean(tiny):
    """With kappa2 = 1 the cloud's sum_l |D^l| w^l / |D| of edge means sum_i n_i w_i / n^l
    is FedAvg's mean over all clients (same local training: it does not depend on time)."""
    flat = mecsim.run(tiny, [*FAST, *CELLS], write=False)
    hier = mecsim.run(tiny, [*FAST, *CELLS, "protocol.kind=hierarchical",
                             "protocol.edge_rounds=1"], write=False)  # fmt: skip
    assert sorted(set(hier.clients["cell"])) == [0, 1]
    for key, value in flat.server_state["global"].params.items():
        np.testing.assert_allclose(
            hier.server_state["global"].params[key].numpy(), value.numpy(), rtol=1e-5, atol=1e-6
        )


def test_backhaul_and_cloud_rows_follow_the_closed_form(tiny):
    link = ["network.backhaul.rate_mbps=100", "network.backhaul.latency_ms=20",
            "network.backhaul.energy_nj_per_bit=50"]  # fmt: skip
    result = mecsim.run(tiny, [*FAST, *CELLS, *link, "protocol.kind=hierarchical",
                               "protocol.edge_rounds=2"], write=False)  # fmt: skip
    events, rounds = result.events, result.rounds
    assert rounds["level"].tolist() == ["edge", "cloud"]
    backhaul = events[events["phase"] == "backhaul"]
    assert sorted(backhaul["direction"]) == ["down", "down", "up", "up"]
    assert (backhaul["round"] == 1).all() and sorted(backhaul["cell"]) == [0, 0, 1, 1]
    nbytes = backhaul["bytes"].to_numpy()
    assert (nbytes == result.clients["state_peak_bytes"].iloc[0]).all()  # one cnn-small model
    np.testing.assert_allclose(backhaul["duration_s"], 0.020 + 8 * nbytes / 100e6, rtol=1e-12)
    np.testing.assert_allclose(backhaul["energy_j"], 8 * nbytes * 50e-9, rtol=1e-12)
    cloud = events[events["phase"] == "aggregate:cloud"]
    assert len(cloud) == 1 and cloud["cell"].iloc[0] == -1
    ups = backhaul[backhaul["direction"] == "up"]
    assert cloud["t_start"].iloc[0] == pytest.approx(ups["t_end"].max())
    edge = events[events["phase"] == "aggregate"]
    assert sorted(edge["cell"]) == [0, 0, 1, 1]  # each edge, each round
    assert (rounds["updates"] == 6).all()


def test_cells_run_their_edge_rounds_at_their_own_pace(tiny):
    result = mecsim.run(tiny, [*FAST, *CELLS, "protocol.kind=hierarchical",
                               "protocol.edge_rounds=2"], write=False)  # fmt: skip
    edge = result.events[result.events["phase"] == "aggregate"]
    first = edge[edge["round"] == 0].set_index("cell")["t_end"]
    second_start = result.events[(result.events["round"] == 1)
                                 & (result.events["phase"] == "download")]  # fmt: skip
    faster = first.idxmin()
    cell_of = result.clients["cell"].to_numpy()
    started = second_start[cell_of[second_start["client"]] == faster]["t_start"].min()
    assert started == pytest.approx(first[faster])  # it did not wait for the other cell
    assert started < first.max()


def test_hierarchical_resumes_like_an_uninterrupted_run():
    settings = [*CELLS, "protocol.kind=hierarchical", "protocol.edge_rounds=2",
                "protocol.rounds=3"]  # fmt: skip
    assert resume_problems(settings) == []


def test_an_algorithm_that_does_not_average_is_refused(tiny, tmp_path, capsys):
    from mecsim.algorithms import ALGORITHMS

    assert aggregates_twice(ALGORITHMS.get("fedavg"))
    assert aggregates_twice(ALGORITHMS.get("fedprox"))
    assert not aggregates_twice(ALGORITHMS.get("scaffold"))
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(tiny))
    code = main(["run", str(scenario), "--out", str(tmp_path / "run"), "--set",
                 "protocol.kind=hierarchical", "--set", "algorithm.name=scaffold"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "protocol.kind" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_the_ledger_invariants_hold_per_cell_radio_edge_device_and_backhaul(tiny):
    from mecsim.analysis.compare import flatten
    from mecsim.analysis.invariants import check_result, check_tables, run_facts

    cells = ['network.cells=[{x_m=0, y_m=0, device="jetson"}, {x_m=1000, y_m=0, '
             "tx_power_dbm=27}]"]  # fmt: skip
    link = ["network.backhaul.energy_nj_per_bit=30", "network.backhaul.latency_ms=7"]
    result = mecsim.run(tiny, [*FAST, *CELLS[1:], *cells, *link, "protocol.kind=hierarchical",
                               "protocol.edge_rounds=2"], write=False)  # fmt: skip
    checks = check_result(result)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    # every check examined the run but the closed-form link budget (several cells) and
    # the handover breaks (static clients), power and band limits (no power control, no
    # allocation)
    assert [c.name for c in checks if c.skipped] == [
        "link budget",
        "handover breaks",
        "power limits",
        "band limits",
    ]
    edge = result.events[(result.events["phase"] == "aggregate") & (result.events["cell"] == 0)]
    assert len(edge) == 2  # on the jetson, 15 W: the row energy check covered them
    tampered = result.events.copy()
    tampered.loc[tampered["role"] == "backhaul", "energy_j"] *= 2
    facts = run_facts(flatten(result.scenario.model_dump(mode="json")))
    again = check_tables(tampered, result.rounds, result.clients, facts)
    assert not next(c for c in again if c.name == "row energy").ok
    slow = result.events.copy()  # a backhaul row that took longer than its closed form
    slow.loc[slow["role"] == "backhaul", "duration_s"] += 1.0
    found = next(c for c in check_tables(slow, result.rounds, result.clients, facts)
                 if c.name == "row energy")  # fmt: skip
    assert any("latency + 8 bytes / rate" in p for p in found.problems)
