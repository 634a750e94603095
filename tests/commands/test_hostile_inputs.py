"""Hostile or damaged run directories given to ``report`` and ``compare``: one line, exit 2."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import mecsim
from mecsim.commands.cli import main

COST_ONLY = ["execution.cost_only=true", "clients.num_samples=20", "protocol.rounds=2"]


@pytest.fixture(scope="module")
def run_dir(tiny_module, tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile") / "run"
    mecsim.run(copy.deepcopy(tiny_module), COST_ONLY, out=out)
    return out


def _truncate(path):
    path.write_bytes(path.read_bytes()[:100])


def _drop_column(path):
    pd.read_parquet(path).drop(columns=["t_end"]).to_parquet(path)


DAMAGE = {
    "truncated events.parquet": ("events.parquet", _truncate),
    "truncated rounds.parquet": ("rounds.parquet", _truncate),
    "invalid summary.json": ("summary.json", lambda p: p.write_text("{not json")),
    "summary.json not an object": ("summary.json", lambda p: p.write_text("[1, 2]")),
    "invalid scenario.resolved.toml": (
        "scenario.resolved.toml",
        lambda p: p.write_text("name = [unclosed"),
    ),
    "incomplete scenario.resolved.toml": (
        "scenario.resolved.toml",
        lambda p: p.write_text('name = "x"\n'),
    ),
    "rounds table missing a column": ("rounds.parquet", _drop_column),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_damaged_run_directory_is_refused_in_one_line(run_dir, tmp_path, capsys, damage, command):
    copied = tmp_path / "run"
    shutil.copytree(run_dir, copied)
    name, spoil = DAMAGE[damage]
    spoil(copied / name)
    args = (
        [command, str(copied)]
        if command == "report"
        else [command, "--out", str(tmp_path / "c"), str(copied)]
    )
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "Traceback" not in err[0]
    assert str(copied) in err[0]
    assert not (tmp_path / "c").exists()


def test_an_intact_run_directory_still_reports(run_dir, capsys):
    assert main(["report", str(run_dir)]) == 0
    assert "fedavg" in capsys.readouterr().out
    assert json.loads((run_dir / "summary.json").read_text())["rounds"] == 2


@pytest.mark.parametrize(
    "seeds, says",
    [("0-99999999999", "more than 10,000"), ("5-1", "from low to high"), ("a", "give numbers")],
)
def test_a_seed_list_that_is_huge_or_reversed_is_refused_in_one_line(tmp_path, capsys, seeds, says):
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "compare",
                "--scenario",
                "scenarios/quickstart.toml",
                "--out",
                str(tmp_path / "c"),
                "--seeds",
                seeds,
            ]
        )
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert says in err[-1] and "Traceback" not in "".join(err)


# --- every hostile input of the reliability review: one line, exit 2, nothing written ----
QUICKSTART = str(Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.toml")
RUN = ["run", QUICKSTART, "--no-progress"] + [
    x
    for o in [
        "execution.cost_only=true",
        "clients.count=4",
        "protocol.rounds=2",
        "clients.num_samples=20",
    ]
    for x in ("--set", o)
]
PLUGINS = {
    "agg": "    def aggregate(self, *a, **k):\n        raise ValueError('boom in aggregate')\n",
    "exit3": "    def aggregate(self, *a, **k):\n        import sys\n        sys.exit(3)\n",
    "kbi": "    def aggregate(self, *a, **k):\n        raise KeyboardInterrupt\n",
}


def _plugin(tmp_path, name: str) -> str:
    path = tmp_path / f"plug_{name}.py"
    path.write_text(
        "from mecsim.algorithms import ALGORITHMS\n"
        "from mecsim.algorithms.fedavg import FedAvg\n"
        f"@ALGORITHMS.register('bad_{name}')\n"
        "class Bad(FedAvg):\n" + PLUGINS[name]
    )
    return str(path)


def _one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert err and "Traceback" not in "\n".join(err) and "internal error" not in err[-1]
    return err[-1]


@pytest.mark.parametrize(
    "name, says",
    [
        ("agg", "raised ValueError: boom in aggregate"),
        ("exit3", "called sys.exit(3)"),
        ("kbi", "raised KeyboardInterrupt"),
    ],
)
def test_a_failing_plugin_is_named_with_its_hook_and_line(
    tmp_path, capsys, monkeypatch, name, says
):
    monkeypatch.chdir(tmp_path)
    path = _plugin(tmp_path, name)
    code = main([*RUN, "--import", path, "--set", f"algorithm.name=bad_{name}", "--out", "out"])
    line = _one_line(capsys)
    assert code == 2 and f"plug_{name}.aggregate()" in line and says in line
    assert not (tmp_path / "out").exists()


def test_an_entry_point_plugin_calling_sys_exit_is_skipped(monkeypatch, capsys, caplog):
    import mecsim.common.plugins as plugins

    class Point:
        name, value = "exits", "exits_at_import"

        def load(self):
            raise SystemExit(3)

    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [Point()])
    assert plugins.load_entry_points() == []
    assert "sys.exit(3)" in caplog.text


def _write(tmp_path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return str(path)


def _sets(*pairs: str) -> list[str]:
    return [x for p in pairs for x in ("--set", p)]


CASES = {
    "empty device cell": (
        lambda t: _sets(
            "clients.table=" + _write(t, "t.csv", "distance_m,device\n1,iot-low\n2,\n")
        ),
        "the device cell is empty",
    ),
    "fractional num_samples": (
        lambda t: _sets("clients.table=" + _write(t, "n.csv", "num_samples\n10.5\n20\n")),
        "not a whole number",
    ),
    "choice of numbers holding a string": (
        lambda t: _sets('clients.bandwidth_mhz={dist="choice", values=[10, "x"]}'),
        "clients.bandwidth_mhz.values.1",
    ),
    "a number given as true": (lambda t: _sets("protocol.rounds=true"), "give a number, not true"),
    "availability in 1e300 s": (
        lambda t: _sets(
            "faults.availability=" + _write(t, "a.csv", "client,start_s,end_s\n0,1e300,1e301\n")
        ),
        "beyond 1e+09 s",
    ),
    "dropout of every job": (lambda t: _sets("faults.dropout=1.0"), "faults.dropout"),
    "lr 1e308": (lambda t: _sets("algorithm.lr=1e308"), "algorithm.lr"),
    "out under a symlink loop": (lambda t: ["--out", str(t / "loop" / "x")], "cannot be resolved"),
    "out with a 300-byte name": (
        lambda t: ["--out", str(t / ("a" * 300))],
        "choose a shorter --out",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_run_inputs_are_refused_before_work_in_one_line(
    tmp_path, capsys, monkeypatch, case
):
    import os

    monkeypatch.chdir(tmp_path)
    os.symlink(tmp_path / "loop2", tmp_path / "loop")
    os.symlink(tmp_path / "loop", tmp_path / "loop2")
    extra, says = CASES[case]
    assert main([*RUN, *extra(tmp_path)]) == 2
    assert says in _one_line(capsys)
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # nothing of a run written


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("flops_per_s", 0.0, "flops_per_s"),
        ("flops_per_s", float("nan"), "flops_per_s"),
        ("power_w", -1.0, "power_w"),
        ("rx_power_w", float("inf"), "rx_power_w"),
    ],
)
def test_a_device_profile_without_physical_meaning_is_refused(field, value, says):
    from mecsim.learning.devices import DeviceProfile

    values = {"flops_per_s": 1e9, "power_w": 1.0, **{field: value}}
    with pytest.raises(ValueError, match=says):
        DeviceProfile("bad", **values)


def test_an_availability_trace_with_a_byte_order_mark_is_read(tmp_path):
    from mecsim.engine.faults import read_availability

    path = tmp_path / "bom.csv"
    path.write_bytes("client,start_s,end_s\n0,0,100\n".encode("utf-8-sig"))
    assert read_availability(path, 2) == {0: [(0.0, 100.0)]}


def test_validate_takes_device(capsys):
    assert main(["validate", QUICKSTART, "--device", "cpu"]) == 0
    assert "ok" in capsys.readouterr().out


def test_the_same_scenario_spelled_by_another_path_has_the_same_digest(tmp_path, monkeypatch):
    from mecsim.engine.checkpoint import scenario_digest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    a = {"clients": {"table": "t.csv"}, "faults": {"availability": "sub/../a.csv"}}
    b = {"clients": {"table": "./t.csv"}, "faults": {"availability": str(tmp_path / "a.csv")}}
    assert scenario_digest(a) == scenario_digest(b)
    assert scenario_digest(a) != scenario_digest({**a, "clients": {"table": "u.csv"}})


def test_compare_refuses_a_run_whose_rounds_table_is_empty(run_dir, tmp_path, capsys):
    copied = tmp_path / "run"
    shutil.copytree(run_dir, copied)
    pd.read_parquet(copied / "rounds.parquet").iloc[:0].to_parquet(copied / "rounds.parquet")
    assert main(["compare", "--out", str(tmp_path / "c"), str(copied)]) == 2
    assert "rounds table is empty" in _one_line(capsys)


def test_a_sweep_worker_exits_when_its_parent_is_gone():
    import subprocess
    import sys
    import time

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys\nfrom mecsim.commands.sweeps import _exit_with_parent\n"
            "_exit_with_parent(os.getppid() + 10**6, poll_s=0.05)\nsys.exit(0)",
        ],
    )
    started = time.monotonic()
    assert child.wait(timeout=30) == 1  # its recorded parent is not its parent: it ends
    assert time.monotonic() - started < 30


def test_sigint_stops_a_run_that_inherited_it_ignored(tmp_path):
    """A script's background job starts with SIGINT ignored; mecsim installs its own."""
    import signal
    import subprocess
    import sys
    import time

    scenario = QUICKSTART
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mecsim",
            "run",
            scenario,
            "--no-progress",
            "--out",
            "run",
            "--set",
            "protocol.rounds=1000",
        ],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.time() + 60
    while not (tmp_path / ".run.claim").exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted (SIGINT)" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "overrides, says",
    [
        # longer than the fastest upload alone (the static check's bound), shorter than any
        # client's download, computation and upload together
        (["protocol.kind=deadline", "protocol.deadline_s=0.02"], "no client update reached"),
        (["faults.availability=TRACE"], "no client is online after"),
    ],
)
def test_validate_simulate_finds_what_only_running_the_protocol_shows(
    tmp_path, capsys, overrides, says
):
    trace = _write(
        tmp_path, "o.csv", "client,start_s,end_s\n" + "".join(f"{c},0,0.5\n" for c in range(4))
    )
    overrides = [o.replace("TRACE", trace) for o in overrides]
    args = ["validate", QUICKSTART, *_sets("clients.count=4", "protocol.rounds=3", *overrides)]
    assert main(args) == 0  # the static checks cannot know, and say so
    assert "--simulate also runs it cost-only" in capsys.readouterr().out
    assert main([*args, "--simulate"]) == 2
    assert says in _one_line(capsys)


def test_a_full_disk_while_writing_the_run_directory_is_one_line_and_leaves_nothing(
    tmp_path, capsys, monkeypatch
):
    import mecsim.runs.runner

    def full(path, write):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mecsim.runs.runner, "write_file", full)
    monkeypatch.chdir(tmp_path)
    assert main([*RUN, "--out", "out"]) == 2
    line = _one_line(capsys)
    assert "output.dir" in line and "No space left on device" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_signal_stop_swallowed_by_a_callback_is_raised_at_the_round_end(tiny, monkeypatch):
    """Python drops an exception raised in a weakref callback or __del__; the signal
    handlers also record their stop, and the run raises it when the round ends."""
    from mecsim.algorithms.fedavg import FedAvg
    from mecsim.common import interrupts

    tiny["protocol"]["rounds"] = 5
    original = FedAvg.aggregate
    calls = []

    def aggregate(self, server_state, uploads, ctx):
        calls.append(ctx.round)
        if len(calls) == 2:
            interrupts.request(KeyboardInterrupt())  # as if its raise had been swallowed
        return original(self, server_state, uploads, ctx)

    monkeypatch.setattr(FedAvg, "aggregate", aggregate)
    with pytest.raises(KeyboardInterrupt):
        mecsim.run(tiny, write=False)
    assert len(calls) == 2 and interrupts.pending is None


def test_a_stop_swallowed_in_a_weakref_callback_prints_no_traceback(capsys):
    """Python reports an exception raised in a weakref callback through
    sys.unraisablehook (a traceback on stderr); the CLI's hook stays silent about a
    signal's stop, which the run raises at its next round end, and passes anything
    else on."""
    import sys
    import weakref

    from mecsim.commands import cli
    from mecsim.common import interrupts

    class Thing:
        pass

    seen = []
    hook = cli._quiet_swallowed_stop(lambda unraisable: seen.append(unraisable.exc_value))
    previous, sys.unraisablehook = sys.unraisablehook, hook
    try:
        for stop in (cli.Terminated(), ValueError("a real bug")):
            thing = Thing()

            def callback(_ref, stop=stop):
                raise interrupts.request(stop) if isinstance(stop, cli.Terminated) else stop

            ref = weakref.ref(thing, callback)
            del thing  # the callback runs now; its exception goes to the hook
            assert ref() is None
    finally:
        sys.unraisablehook = previous
        interrupts.clear()
    assert [type(e) for e in seen] == [ValueError]
    assert "Traceback" not in capsys.readouterr().err


def test_an_error_raised_by_code_a_signal_broke_counts_as_the_interruption(
    monkeypatch, capsys, tiny, tmp_path
):
    """A SIGINT landing inside vmap can leave torch raising its own RuntimeError instead
    of the stop (seen in CI); with the signal's stop pending, main reports the
    interruption (exit 130), not an internal error."""
    import tomli_w

    from mecsim.commands import cli
    from mecsim.common import interrupts

    def broken(args):
        interrupts.request(cli.Interrupted())
        raise RuntimeError("!dynamicLayerStack.empty() INTERNAL ASSERT FAILED")

    monkeypatch.setattr(cli, "_main", broken)
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err
    assert "interrupted (SIGINT)" in err and "internal error" not in err
    assert interrupts.pending is None
