"""Client faults: dropout and availability traces are events, never silent losses."""

import math

import numpy as np
import pandas as pd
import pytest

import mecsim
from mecsim.commands.cli import main
from mecsim.common.errors import ConfigError
from mecsim.common.rng import numpy_rng
from mecsim.engine.faults import Drop, Faults, FaultsConfig

COST_ONLY = ["execution.cost_only=true", "clients.num_samples=40", "protocol.rounds=3"]


def trace(tmp_path, rows: str) -> str:
    path = tmp_path / "trace.csv"
    path.write_text("client,start_s,end_s\n" + rows)
    return str(path)


# --- the fault model alone ----------------------------------------------------------
def test_availability_intervals_answer_online_offline_and_next_online(tmp_path):
    faults = Faults(FaultsConfig(availability=trace(tmp_path, "0,1,2\n0,5,6\n1,0,10\n")), 3, seed=0)
    assert not faults.online(0, 0.5) and faults.online(0, 1.0) and not faults.online(0, 2.0)
    assert faults.offline_at(0, 1.5) == 2.0 and faults.offline_at(0, 3.0) == 3.0
    assert faults.offline_at(2, 7.0) == math.inf  # no row: always online
    assert faults.next_online([0], 2.5) == 5.0 and faults.next_online([0], 6.0) == math.inf
    assert faults.next_online([0, 1], 2.5) == 2.5


def test_dropout_plan_follows_its_random_stream():
    """Per round: drops iff u < p, after v x (total compute) seconds, in the task there."""
    p, seconds = 0.5, [2.0, 6.0]
    faults = Faults(FaultsConfig(dropout=p), 10, seed=7)
    dropped = 0
    for client in range(10):
        u, v = numpy_rng(7, "dropout", client, 4).random(2)
        plan = faults.plan(client, 4, seconds, start=0.0)
        if u >= p:
            assert plan is None
            continue
        dropped += 1
        elapsed = v * 8.0
        expected = Drop(0, elapsed, "dropout") if elapsed < 2 else Drop(1, elapsed - 2, "dropout")
        assert plan.task == expected.task and plan.seconds == pytest.approx(expected.seconds)
    assert 0 < dropped < 10


def test_going_offline_before_the_compute_ends_drops_at_that_moment(tmp_path):
    faults = Faults(FaultsConfig(availability=trace(tmp_path, "0,0,5\n")), 1, seed=0)
    assert faults.plan(0, 0, [2.0, 2.0], start=0.5) is None  # done at 4.5 < 5
    plan = faults.plan(0, 0, [2.0, 2.0], start=2.0)  # offline at 5: 1 s into task 1
    assert (plan.task, plan.seconds, plan.cause) == (1, pytest.approx(1.0), "offline")


@pytest.mark.parametrize(
    "rows, says",
    [
        ("0,2,1\n", "start_s < end_s"),
        ("9,0,1\n", "not in 0..3"),
        ("0,0,2\n0,1,3\n", "overlap"),
        ("0,zero,1\n", "expected an integer"),
        ("0,0,inf\n", "finite"),
    ],
)
def test_bad_traces_are_refused_before_work(tiny, tmp_path, capsys, rows, says):
    import tomli_w

    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    extra = [f"--set=faults.availability={trace(tmp_path, rows)!r}".replace("'", '"')]
    assert main(["validate", str(path), *extra]) == 2
    assert main(["run", str(path), "--out", str(tmp_path / "run"), *extra]) == 2
    err = capsys.readouterr().err
    assert "faults.availability" in err and says in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


# --- through whole runs -------------------------------------------------------------
@pytest.mark.parametrize("kind", ["compute_and_wait", "wait_free", "deadline", "fedasync"])
def test_dropped_clients_send_nothing_and_each_drop_is_an_event(tiny, kind):
    extra = ["faults.dropout=0.4", f"protocol.kind={kind}"]
    if kind == "deadline":
        extra.append("protocol.deadline_s=100")
    if kind == "wait_free":
        tiny["algorithm"] = {"name": "ditto", "steps": 3, "batch_size": 16}
    result = mecsim.run(tiny, COST_ONLY + extra, write=False)
    e = result.events
    drops = e[e["phase"] == "fault:dropout"]
    assert len(drops) > 0
    for _, drop in drops.iterrows():
        job = e[(e["job"] == drop["job"]) & (e["client"] == drop["client"])]
        assert not (job["phase"] == "upload").any()
        computed = job[job["phase"].str.startswith("compute:")]
        assert computed["t_end"].max() == pytest.approx(drop["t_start"])
    if kind != "fedasync":  # one update per client that uploaded, none from a dropped one
        uploads = e[e["phase"] == "upload"].groupby("round").size()
        assert result.rounds.set_index("round")["updates"].equals(
            uploads.reindex(result.rounds["round"], fill_value=0)
        )
    assert len(result.rounds) == 3


def test_a_client_going_offline_mid_compute_stops_there_and_is_not_selected_after(tiny, tmp_path):
    base = mecsim.run(tiny, COST_ONLY, write=False).events
    c0 = base[(base["client"] == 0) & (base["round"] == 0)]
    compute = c0[c0["phase"].str.startswith("compute:")].iloc[0]
    middle = float(compute["t_start"] + compute["t_end"]) / 2
    path = trace(tmp_path, f"0,0,{middle!r}\n")
    result = mecsim.run(tiny, COST_ONLY + [f"faults.availability={path!r}"], write=False)
    e = result.events
    mine = e[e["client"] == 0]
    offline = mine[mine["phase"] == "fault:offline"]
    assert len(offline) == 1 and offline["t_start"].iloc[0] == pytest.approx(middle)
    partial = mine[mine["phase"] == compute["phase"]].iloc[0]
    assert partial["t_end"] == pytest.approx(middle)
    assert partial["flops"] == pytest.approx(compute["flops"] / 2, rel=1e-6)
    assert not (mine["phase"] == "upload").any() and set(mine["round"]) == {0}
    assert list(result.rounds["num_selected"]) == [4, 3, 3]


def test_a_run_whose_clients_never_come_back_stops_with_a_clear_error(tiny, tmp_path):
    rows = "".join(f"{c},0,0.001\n" for c in range(4))
    with pytest.raises(ConfigError, match="no client is online"):
        mecsim.run(tiny, COST_ONLY + [f"faults.availability={trace(tmp_path, rows)!r}"])


def test_faults_are_the_same_on_every_executor(tiny):
    tiny["faults"] = {"dropout": 0.5, "dropout_per": "task"}
    tiny["algorithm"] = {"name": "ditto", "steps": 2, "batch_size": 16}
    serial = mecsim.run(tiny, ["execution.executor=serial"], write=False)
    batched = mecsim.run(tiny, ["execution.executor=batched"], write=False)
    columns = ["round", "client", "phase", "t_start", "t_end", "bytes", "flops"]
    pd.testing.assert_frame_equal(serial.events[columns], batched.events[columns])
    assert (serial.events["phase"] == "fault:dropout").any()
    np.testing.assert_allclose(
        serial.rounds["personal_acc"], batched.rounds["personal_acc"], atol=1e-6
    )
