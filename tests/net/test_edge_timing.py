"""The multi-cell edge's timing and energy (issue 46): a broadcast receiver that finishes
early acts then, handovers add no idle time, and no client runs two jobs at once under
HierFAVG with moving clients."""

from __future__ import annotations

import pandas as pd

import mecsim
from mecsim.analysis.invariants import check_result
from tests.net.test_cells import placed

FAST = ["algorithm.steps=2", "protocol.rounds=2"]


def first_compute_after_download(events: pd.DataFrame) -> pd.DataFrame:
    """Per (round, client): its download's end and its first computation's start."""
    rows = events[events["client"] >= 0]
    down = rows[rows["phase"] == "download"].groupby(["round", "client"])["t_end"].max()
    comp = rows[rows["phase"].str.startswith("compute")].groupby(["round", "client"])
    return pd.DataFrame({"download_end": down, "compute_start": comp["t_start"].min()})


def test_a_broadcast_receiver_that_finishes_early_computes_at_once(tiny, tmp_path):
    # two cells on different channels (cell 1 idle); both clients in cell 0, one near, one
    # far: the near one's download ends long before the far one's
    cells = [{"x_m": 0.0, "y_m": 0.0}, {"x_m": 1000.0, "y_m": 0.0}]
    scenario = placed(tiny, [(50.0, 0.0), (400.0, 0.0)], tmp_path, cells=cells,
                      frequency_reuse=2)  # fmt: skip
    events = mecsim.run(scenario, [*FAST, "execution.cost_only=true"], write=False).events
    assert set(events.loc[events["client"] >= 0, "cell"]) == {0}
    down = events[events["phase"] == "download"].set_index(["round", "client"])
    seconds = down["t_end"] - down["t_start"]
    assert (seconds.xs(0, level="client") < seconds.xs(1, level="client") / 10).all()
    times = first_compute_after_download(events)
    pd.testing.assert_series_equal(
        times["compute_start"], times["download_end"], check_names=False, rtol=0, atol=1e-12
    )


def test_hierfavg_with_driving_clients_never_runs_two_jobs_of_a_client_at_once():
    # the shipped scenario's own driving point: a client that hands over from a slow cell
    # to a fast one joined the fast cell's next round while still uploading for the slow
    result = mecsim.run(
        "scenarios/multicell_mobility.toml",
        [
            "execution.cost_only=true",
            'clients.mobility.model="random_waypoint"',
            "clients.mobility.speed_mps=[10.0, 30.0]",
            "protocol.rounds=4",
        ],
        write=False,
    )
    events = result.events
    assert (events["phase"] == "handover").any()
    failed = [c for c in check_result(result) if not c.ok]
    assert not failed, failed
    jobs = events[(events["client"] >= 0) & (events["round"] >= 0)]
    spans = jobs.groupby(["client", "round"]).agg(start=("t_start", "min"), end=("t_end", "max"))
    for _, rounds in spans.groupby(level="client"):
        ordered = rounds.sort_values("start")
        assert (ordered["start"].to_numpy()[1:] >= ordered["end"].to_numpy()[:-1] - 1e-9).all()
