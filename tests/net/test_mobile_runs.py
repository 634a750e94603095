"""Runs with moving clients: handover rows, cells that follow, relayed FedAvg through
the cloud, invariants, resume, and one-line errors for bad mobility settings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import tomli_w

import mecsim
from mecsim.commands.cli import main

FAST = ["algorithm.steps=2", "protocol.rounds=3", "execution.cost_only=true"]
MOVING = [
    "network.cells=[{x_m=0, y_m=0}, {x_m=600, y_m=0}, {x_m=1200, y_m=0}]",
    'clients.x_m={dist="uniform", low=-100, high=1300}',
    'clients.y_m={dist="uniform", low=-50, high=50}',
    "clients.count=8",
    'clients.mobility.model="random_waypoint"',
    "clients.mobility.speed_mps=[150, 250]",  # fast enough to hand over in a short run
    "network.handover_time_to_trigger_s=0.02",
]


def test_handover_rows_are_the_schedule_and_rows_name_the_new_cell(tiny):
    result = mecsim.run(tiny, [*FAST, *MOVING], write=False)
    events = result.events
    rows = events[events["phase"].str.startswith("handover")]
    assert len(rows) > 0
    sim_end = float(events["t_end"].max())
    from mecsim.runs.world import build_links

    _, network = build_links(result.scenario)  # the same seeded trajectories and schedule
    assert network.handovers is not None
    network.handovers.advance(sim_end)
    expected = [(h.t, h.client, h.target) for h in network.handovers.handovers if h.t <= sim_end]
    got = list(zip(rows["t_start"], rows["client"], rows["cell"], strict=True))
    assert got == expected
    full = rows[rows["phase"] == "handover"]
    assert np.allclose(full["t_end"] - full["t_start"], 0.05)  # the default break
    assert (rows["bytes"] == 0).all() and (rows["energy_j"] == 0).all()
    # a client's rows after its handover carry the new cell
    h = rows.iloc[0]
    later = events[(events["client"] == h.client) & (events["t_end"] > h.t_end)]
    later = later[~later["phase"].str.startswith("handover")]
    if len(later):
        moved = network.handovers.cell_of(int(h.client), float(later["t_end"].iloc[0]))
        assert later["cell"].iloc[0] == moved


def test_invariants_hold_with_moving_clients_and_both_transfer_modes(tiny):
    from mecsim.analysis.invariants import check_result

    for transfer in ("resume", "restart"):
        result = mecsim.run(tiny, [*FAST, *MOVING, f'network.handover_transfer="{transfer}"'],
                            write=False)  # fmt: skip
        checks = check_result(result)
        assert all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_moving_runs_are_reproducible_and_the_seed_moves_them(tiny):
    a = mecsim.run(tiny, [*FAST, *MOVING], write=False)
    b = mecsim.run(tiny, [*FAST, *MOVING], write=False)
    c = mecsim.run(tiny, [*FAST, *MOVING, "seed=5"], write=False)
    assert a.events.equals(b.events)
    assert not a.events.equals(c.events)


def test_a_moving_hierarchical_run_resumes_like_an_uninterrupted_one():
    from mecsim.commands.conformance import resume_problems

    settings = [*MOVING, "protocol.kind=hierarchical", "protocol.edge_rounds=2",
                "protocol.rounds=4"]  # fmt: skip
    assert resume_problems(settings) == []


def test_relay_sends_every_client_update_up_the_backhaul(tiny):
    static = [m for m in MOVING if "mobility" not in m]
    result = mecsim.run(tiny, [*FAST, *static, "protocol.kind=hierarchical", "protocol.relay=true",
                               "protocol.edge_rounds=1"], write=False)  # fmt: skip
    e = result.events
    up = e[(e["role"] == "backhaul") & (e["direction"] == "up")]
    uploads = e[(e["phase"] == "upload")]
    for round_, rows in up.groupby("round"):
        assert rows["bytes"].sum() == uploads[uploads["round"] == round_]["bytes"].sum()
    cloud = e[e["phase"] == "aggregate:cloud"]
    assert len(cloud) == 3  # every round reaches the cloud


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (['clients.mobility.model="random_waypoint"'], "clients.mobility"),
        ([*MOVING[:4], "clients.mobility.area_m=[0, 0, -5, 10]"], "clients.mobility"),
        ([*MOVING[:4], 'clients.mobility.model="random_waypoint"', "clients.mobility.speed_mps=[0, 2]"],
         "clients.mobility"),
        ([*MOVING[:4], 'clients.mobility.model="gauss_markov"', "clients.mobility.speed_mps=-1"],
         "clients.mobility"),
        ([*MOVING[:4], 'clients.mobility.model="random_waypoint"', "clients.mobility.area_m=[0, -50, 500, 50]"],
         "clients.mobility.area_m"),
        ([*MOVING[:4], 'clients.mobility.model="trace"'], "clients.mobility"),
        # bounded work: legs of micrometres or updates every 0.1 microsecond never ended
        ([*MOVING[:4], 'clients.mobility.model="random_waypoint"', "clients.mobility.pause_s=0",
          "clients.mobility.area_m=[0, 0, 2e-6, 2e-6]"], "clients.mobility"),
        ([*MOVING[:4], 'clients.mobility.model="gauss_markov"', "clients.mobility.step_s=1e-7"],
         "clients.mobility.step_s"),
        (["algorithm.epochs=1000000000"], "algorithm.epochs"),
        (["evaluation.new_client_epochs=1000000000"], "evaluation.new_client_epochs"),
        (["network.handover_margin_db=-3"], "network.handover_margin_db"),
        (['network.handover_transfer="teleport"'], "network.handover_transfer"),
        (["protocol.kind=hierarchical", "protocol.relay=true"], "protocol"),
    ],
)  # fmt: skip
def test_bad_mobility_settings_are_refused_in_one_line(tiny, refused, overrides, field):
    refused(tiny, overrides, field)


def test_a_trace_with_a_bad_client_is_refused_naming_the_row(tiny, tmp_path, capsys):
    trace = tmp_path / "moves.csv"
    trace.write_text("t,client,x,y\n0,0,10,0\n1,99,20,0\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(tiny))
    args = ["run", str(scenario), "--out", str(tmp_path / "run"),
            *sum((["--set", o] for o in [*MOVING[:4], 'clients.mobility.model="trace"',
                                         f'clients.mobility.trace="{trace}"']), [])]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "clients.mobility.trace" in err and "row 3" in err and "Traceback" not in err


def test_a_trace_that_puts_a_client_out_of_reach_names_the_trace(tiny, tmp_path, capsys):
    # the link check named clients.distance_m, a key such a scenario does not set
    trace = tmp_path / "far.csv"
    rows = [f"0,{c},{1e9 if c == 2 else 100.0 * c + 50},0" for c in range(8)]
    trace.write_text("t,client,x,y\n" + "\n".join(rows) + "\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(tiny))
    settings = [*MOVING[:4], 'clients.mobility.model="trace"', f'clients.mobility.trace="{trace}"',
                "clients.mobility.area_m=[-2e9, -1e3, 2e9, 1e3]"]  # fmt: skip
    args = ["run", str(scenario), "--out", str(tmp_path / "run"),
            *sum((["--set", o] for o in settings), [])]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "clients.mobility.trace" in err and "client 2" in err and "Traceback" not in err
    assert "clients.distance_m" not in err


def test_a_client_handing_over_between_cells_takes_part_once_per_edge_round(tiny):
    # cells run their edge rounds at their own pace: a client that moved from a cell that
    # already started round r to one that had not was selected by both (a crash)
    settings = [*FAST, *MOVING, "clients.count=40", "clients.mobility.speed_mps=[300, 500]",
                "protocol.kind=hierarchical", "protocol.edge_rounds=3", "protocol.rounds=9"]  # fmt: skip
    events = mecsim.run(tiny, settings, write=False).events
    assert (events["phase"] == "handover").any()
    uploads = events[events["phase"].str.startswith("upload")]
    assert uploads.groupby(["round", "client"]).size().max() == 1


def test_moving_runs_agree_on_every_executor(tiny):
    settings = [
        "algorithm.steps=2",
        "protocol.rounds=3",
        *MOVING,
        "clients.mobility.speed_mps=[300, 500]",
    ]
    serial = mecsim.run(tiny, settings, executor="serial", write=False)
    batched = mecsim.run(tiny, settings, executor="batched", write=False)
    dry = mecsim.run(tiny, [*settings, "execution.cost_only=true"], write=False)
    assert (serial.events["phase"] == "handover").any()
    pd.testing.assert_frame_equal(serial.events, batched.events)
    pd.testing.assert_frame_equal(serial.events, dry.events)


@pytest.mark.parametrize("kind", ["wait_free", "fedasync"])
def test_every_protocol_runs_with_moving_clients_and_keeps_the_invariants(tiny, kind):
    from mecsim.analysis.invariants import check_result

    result = mecsim.run(tiny, [*FAST, *MOVING, "clients.mobility.speed_mps=[300, 500]",
                               f"protocol.kind={kind}"], write=False)  # fmt: skip
    assert all(c.ok for c in check_result(result))
    assert (result.events["phase"] == "upload").any()
