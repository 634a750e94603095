"""Sweeps: parsing, grid and zip, per-algorithm keys, names, checks before work, resume, -j."""

from __future__ import annotations

import logging

import pandas as pd
import pytest
import tomli_w

import mecsim
from mecsim.commands.cli import main
from mecsim.commands.sweeps import (
    apply_point,
    axis,
    expand,
    parse_sweep,
    point_names,
    split_top_level,
)
from mecsim.common.errors import ConfigError


def test_commas_inside_inline_tables_arrays_and_quotes_do_not_split():
    assert split_top_level('{dist="uniform", low=1},{dist="constant", value=2}') == [
        '{dist="uniform", low=1}',
        '{dist="constant", value=2}',
    ]
    key, values = parse_sweep('clients.distance_m={dist="uniform", low=1, high=2}, 50')
    assert key == "clients.distance_m"
    assert values == [{"dist": "uniform", "low": 1, "high": 2}, 50]
    assert parse_sweep("protocol.rounds=[2, 3]") == ("protocol.rounds", [2, 3])
    assert parse_sweep('name="a,b",c') == ("name", ["a,b", "c"])


def test_algorithm_choices_carry_their_own_keys():
    key, values = parse_sweep("algorithm=ditto:lam=0.1:epochs=2,fedprox:mu=0.01,fedavg")
    assert axis(key, values) == [
        {"algorithm.name": "ditto", "algorithm.lam": 0.1, "algorithm.epochs": 2},
        {"algorithm.name": "fedprox", "algorithm.mu": 0.01},
        {"algorithm.name": "fedavg"},
    ]
    assert axis("protocol", [{"kind": "fedbuff", "buffer_size": 2}]) == [
        {"protocol.kind": "fedbuff", "protocol.buffer_size": 2}
    ]
    with pytest.raises(ConfigError, match="give key=value"):
        axis("algorithm", ["ditto:lam"])


def test_switching_algorithm_drops_the_settings_the_new_one_lacks(tiny):
    tiny["algorithm"].update({"name": "ditto", "lam": 0.5})
    data = apply_point(tiny, {"algorithm.name": "fedprox", "algorithm.mu": 0.01})
    assert "lam" not in data["algorithm"] and data["algorithm"]["steps"] == 3
    scenario = mecsim.load_scenario(data)
    assert scenario.algorithm.name == "fedprox" and scenario.algorithm.mu == 0.01
    # the plain override keeps ditto's key and is refused, naming the owner
    with pytest.raises(Exception, match="algorithm.lam: is a setting of algorithm"):
        mecsim.load_scenario(tiny, {"algorithm.name": "fedprox"})


def test_grid_crosses_and_zip_pairs():
    bw, rounds = axis("clients.bandwidth_mhz", [1, 5]), axis("protocol.rounds", [2, 3])
    assert len(expand([bw, rounds])) == 4
    assert expand([bw, rounds], mode="zip") == [
        {"clients.bandwidth_mhz": 1, "protocol.rounds": 2},
        {"clients.bandwidth_mhz": 5, "protocol.rounds": 3},
    ]
    assert [p["seed"] for p in expand([bw], seeds=[0, 1])] == [0, 1, 0, 1]
    with pytest.raises(ConfigError, match="equal length"):
        expand([bw, axis("protocol.rounds", [2, 3, 4])], mode="zip")


def test_names_never_collide():
    names = point_names([{"output.name": "a b"}, {"output.name": "a_b"}], "x")
    assert len(set(names)) == 2 and all(n.startswith("name=a_b__") for n in names)
    long = point_names([{"data.dataset": "d" * 200}], "x")[0]
    assert len(long) <= 120
    assert point_names([{"algorithm.name": "ditto", "algorithm.lam": 0.1}], "x") == [
        "algorithm=ditto__lam=0.1"
    ]
    assert point_names([{"clients.bandwidth_mhz": 5.0}], "x") == ["bandwidth_mhz=5"]
    with pytest.raises(ConfigError, match="are the same run"):
        point_names([{"algorithm.lr": 0.1}, {"algorithm.lr": 1e-1}], "x")


@pytest.fixture
def cost_only(tiny, tmp_path):
    tiny["execution"] = {"cost_only": True}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    return path


def test_a_mixed_algorithm_sweep_from_the_command_line(cost_only, tmp_path):
    out = tmp_path / "cmp"
    sweep = "algorithm=ditto:lam=0.25,fedprox:mu=0.01"
    assert main(["compare", "--scenario", str(cost_only), "--sweep", sweep, "--out", str(out)]) == 0
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["algorithm=ditto__lam=0.25", "algorithm=fedprox__mu=0.01"]
    resolved = (out / "runs" / runs[0] / "scenario.resolved.toml").read_text()
    assert "lam = 0.25" in resolved
    table = pd.read_csv(out / "comparison" / "compare.csv")
    assert table["algorithm"].tolist() == ["ditto", "fedprox"]


def test_every_point_is_checked_before_the_first_run(cost_only, tmp_path, capsys):
    out = tmp_path / "cmp"
    bad = "algorithm=ditto:lam=0.25,fedprox:lam=0.01"
    assert main(["compare", "--scenario", str(cost_only), "--sweep", bad, "--out", str(out)]) == 2
    assert "algorithm.lam: is a setting of algorithm" in capsys.readouterr().err
    assert not out.exists()


def test_resume_runs_only_the_missing_points(cost_only, tmp_path, caplog):
    out = tmp_path / "cmp"
    args = ["compare", "--scenario", str(cost_only), "--sweep", "clients.bandwidth_mhz=1,5"]
    args += ["--out", str(out)]
    with caplog.at_level(logging.INFO, logger="mecsim"):
        assert main(args) == 0
    assert "[2/2] bandwidth_mhz=5 done; elapsed 0:00:" in caplog.text
    kept = out / "runs" / "bandwidth_mhz=1"
    written = (kept / "events.parquet").stat().st_mtime_ns
    events = pd.read_parquet(out / "runs" / "bandwidth_mhz=5" / "events.parquet")
    # without --resume an existing sweep is refused before any work
    assert main(args) == 2
    import shutil

    shutil.rmtree(out / "runs" / "bandwidth_mhz=5")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mecsim"):
        assert main(args + ["--resume"]) == 0
    assert "resume: 1 of 2 points already finished" in caplog.text
    assert (kept / "events.parquet").stat().st_mtime_ns == written
    again = pd.read_parquet(out / "runs" / "bandwidth_mhz=5" / "events.parquet")
    pd.testing.assert_frame_equal(events, again)


def test_resume_refuses_a_folder_of_other_settings(cost_only, tmp_path, capsys):
    out = tmp_path / "cmp"
    mecsim.run(cost_only, ["clients.bandwidth_mhz=2"], out=out / "runs" / "bandwidth_mhz=1")
    args = ["compare", "--scenario", str(cost_only), "--sweep", "clients.bandwidth_mhz=1,5"]
    assert main(args + ["--out", str(out), "--resume"]) == 2
    assert "holds a run of different settings" in capsys.readouterr().err
    assert not (out / "runs" / "bandwidth_mhz=5").exists()


def test_parallel_points_give_the_same_tables(cost_only, tmp_path):
    args = ["compare", "--scenario", str(cost_only), "--sweep", "clients.bandwidth_mhz=1,5"]
    assert main(args + ["--out", str(tmp_path / "serial")]) == 0
    assert main(args + ["--out", str(tmp_path / "parallel"), "-j", "2"]) == 0
    for name in ("bandwidth_mhz=1", "bandwidth_mhz=5"):
        serial = pd.read_parquet(tmp_path / "serial" / "runs" / name / "events.parquet")
        parallel = pd.read_parquet(tmp_path / "parallel" / "runs" / name / "events.parquet")
        pd.testing.assert_frame_equal(serial, parallel)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ray", "--ray-resources", "num_cpus=two"], "--ray-resources: 'num_cpus=two'"),
        (["--ray", "--ray-resources", "num_cpus=-1"], "give NAME=AMOUNT pairs"),
        (["--ray", "--ray-resources", "num_cpus=nan"], "give NAME=AMOUNT pairs"),
        (["--ray", "--ray-resources", "num_cpus=inf"], "give NAME=AMOUNT pairs"),
        (["--ray-resources", "num_cpus=2"], "--ray-resources: asks a Ray cluster for resources"),
        (["--ray", "-j", "2"], "-j: --ray runs as many points at once"),
        (["--ray", "127.0.0.1:1"], "--ray: no Ray cluster answers at 127.0.0.1:1"),
        (["--ray", "headnode"], "--ray: 'headnode': give HOST:PORT"),
    ],
)
def test_bad_ray_sweep_options_are_refused_before_any_work(
    cost_only, tmp_path, capsys, extra, message
):
    out = tmp_path / "cmp"
    args = ["compare", "--scenario", str(cost_only), "--sweep", "clients.bandwidth_mhz=1,5"]
    assert main([*args, "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (out / "runs").exists()


def test_ray_without_a_scenario_is_refused(tmp_path, capsys):
    assert main(["compare", "some-run", "--out", str(tmp_path / "c"), "--ray"]) == 2
    assert "--ray: --ray runs a sweep's points: give --scenario" in capsys.readouterr().err


def test_a_run_on_a_ray_address_nothing_listens_at_is_refused_in_one_line(tiny, tmp_path, capsys):
    pytest.importorskip("ray")
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    out = tmp_path / "run"
    settings = ["--set", "execution.executor=ray", "--set", "execution.ray_address=127.0.0.1:1"]
    assert main(["run", str(path), "--out", str(out), *settings]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: execution.ray_address: no Ray cluster answers at 127.0.0.1:1 (Connection "
        "refused); start one with `ray start --head` or give its address"
    ]
    assert not out.exists()


def test_a_sweep_of_placed_clients_resumes(tiny, tmp_path, capsys):
    # its points' resolved scenarios spell out distance_m's default beside the positions,
    # which loading refused as "positions or distance_m, not both": every --resume failed
    import tomli_w

    tiny["network"] = {"cells": [{"x_m": 0.0, "y_m": 0.0}, {"x_m": 1000.0, "y_m": 0.0}]}
    tiny["clients"] = {"count": 4, "x_m": {"dist": "uniform", "low": -300, "high": 1300},
                       "y_m": 0.0}  # fmt: skip
    tiny["execution"] = {"cost_only": True}
    scenario = tmp_path / "placed.toml"
    scenario.write_text(tomli_w.dumps(tiny))
    args = ["compare", "--scenario", str(scenario), "--sweep", "clients.bandwidth_mhz=5,10",
            "--out", str(tmp_path / "cmp")]  # fmt: skip
    assert main(args) == 0
    assert main([*args, "--resume"]) == 0, capsys.readouterr().err
    for point in (tmp_path / "cmp" / "runs").iterdir():
        assert main(["validate", str(point / "scenario.resolved.toml")]) == 0


def test_sigterm_stops_a_parallel_sweeps_running_points_and_writes_none(endless_file, tmp_path):
    """A sweep's pool waited for the points under way, so a scheduler's SIGTERM left it
    running (and writing) until they ended; now each worker's point stops as a run in the
    foreground does."""
    import signal
    import subprocess
    import sys
    import time

    path = endless_file
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mecsim", "compare", "--scenario", str(path), "--out", str(out),
         "--sweep", "algorithm.lr=0.01,0.02", "-j", "2"],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    runs = out / "runs"
    deadline = time.time() + 120
    while len(list(runs.glob(".*.claim")) if runs.is_dir() else []) < 2:
        assert time.time() < deadline and proc.poll() is None, "the points never started"
        time.sleep(0.2)
    time.sleep(2.0)  # both points well into training
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the sweep went on after SIGTERM")

    assert proc.returncode == 143 and "Traceback" not in err
    assert not list(runs.iterdir())  # no point, claim or partial left
