"""The command line: run, validate, list, and clear errors that leave nothing behind."""

import pytest
import tomli_w

from mecsim.commands.cli import main


def write(tmp_path, data, name="scenario.toml"):
    path = tmp_path / name
    path.write_text(tomli_w.dumps(data))
    return path


def test_list_reads_the_registries(capsys):
    assert main(["list", "algorithms"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    from mecsim.algorithms import ALGORITHMS

    assert names == ALGORITHMS.names()
    assert {"fedavgm", "fedbn", "fedper", "fedrep", "fedbabu", "moon", "scaffold", "feddyn"} <= set(
        names
    )

    for kind in ("models", "datasets", "devices", "partitions", "fading", "protocols"):
        assert main(["list", kind]) == 0
    assert "cnn-small" in capsys.readouterr().out


def test_validate_accepts_the_quickstart(capsys):
    assert main(["validate", "scenarios/quickstart.toml"]) == 0
    assert "ok" in capsys.readouterr().out


def test_validate_reports_every_problem_with_its_path(tmp_path, capsys):
    path = write(
        tmp_path, {"clients": {"count": -1, "bandwidth_mhz": -3}, "protocol": {"participation": 2}}
    )

    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    for field in ("clients.count", "protocol.participation"):
        assert f"error: {field}:" in err


def test_run_writes_the_run_directory(tmp_path, tiny, capsys):
    path = write(tmp_path, tiny)
    out = tmp_path / "run"

    assert (
        main(["run", str(path), "--out", str(out), "--set", "protocol.rounds=1", "--no-progress"])
        == 0
    )
    assert (out / "report.md").is_file() and (out / "rounds.csv").read_text().count("\n") == 2


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["algorithm.name=fedmagic"], "algorithm.name"),
        (["data.dataset=imagenet"], "data.dataset"),
        (["clients.bandwidth_mhz=-10"], "clients.bandwidth_mhz"),
        (["clients.bandwidth_mhz=0"], "clients.bandwidth_mhz"),
        (['clients.distance_m={dist="uniform",low=500,high=100}'], "clients.distance_m"),
        (["protocol.participation=0"], "protocol.participation"),
        (["protocol.participation=1.2"], "protocol.participation"),
        (["data.dataset=mnist", "data.root=/nonexistent/mecsim-data"], "data.root"),
        (["data.dataset=cifar10"], "data.root"),
    ],
)
def test_bad_input_exits_nonzero_names_the_field_and_writes_nothing(
    tmp_path, tiny, capsys, overrides, field
):
    path = write(tmp_path, tiny)
    out_parent = tmp_path / "runs"
    args = ["run", str(path), "--out", str(out_parent / "run"), "--no-progress"]
    for override in overrides:
        args += ["--set", override]

    code = main(args)

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error:") and field in err
    assert not out_parent.exists() or not any(out_parent.iterdir())


def test_existing_run_directory_is_not_overwritten(tmp_path, tiny, capsys):
    path = write(tmp_path, tiny)
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")

    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"


def test_missing_scenario_file_is_a_clear_error(capsys):
    assert main(["validate", "no/such/file.toml"]) == 2
    assert "file not found" in capsys.readouterr().err


def test_a_crash_mid_run_leaves_no_partial_directory(tmp_path, tiny, monkeypatch):
    import mecsim.analysis
    import mecsim.runs.runner

    def explode(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(mecsim.analysis, "render_report", explode)
    out = tmp_path / "runs" / "crashy"

    with pytest.raises(RuntimeError):
        mecsim.runs.runner.run(tiny, out=out)
    assert not out.exists() and list((tmp_path / "runs").iterdir()) == []


def test_the_python_entry_point_has_the_runners_signature_and_a_docstring():
    import inspect

    import mecsim
    from mecsim.runs.runner import run

    assert list(inspect.signature(mecsim.run).parameters) == list(inspect.signature(run).parameters)
    for name in inspect.signature(run).parameters:
        assert f"{name}:" in mecsim.run.__doc__


def test_every_command_line_option_has_help():
    import argparse

    from mecsim.commands.parser import build_parser as _parser

    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"mecsim {name} {action.option_strings or action.dest}"


def test_summary_records_the_protocol_the_network_and_the_executor_auto_chose(tiny, tmp_path):
    import json

    import mecsim

    out = tmp_path / "run"
    mecsim.run(tiny, ["output.events_csv=false", "network.fading=rayleigh"], out=out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["executor_setting"] == "auto"
    assert summary["executor"] in ("serial", "batched")
    assert summary["protocol"]["kind"] == "compute_and_wait" and summary["protocol"]["rounds"] == 2
    assert summary["network"]["fading"] == "rayleigh"
    assert summary["device"] == "cpu"
    # events.csv is optional; the Parquet table always exists
    assert not (out / "events.csv").exists() and (out / "events.parquet").is_file()
    assert (out / "rounds.csv").is_file()


def test_the_progress_bar_numbers_rounds_as_the_tables_do(tiny, capsys):
    import mecsim

    result = mecsim.run(tiny, write=False, progress=True)
    err = capsys.readouterr().err
    last = int(result.rounds["round"].iloc[-1])
    assert f"round={last}," in err and f"round={last + 1}," not in err


def test_a_reader_that_stops_early_gets_no_internal_error():
    import subprocess
    import sys

    done = subprocess.run(
        f"{sys.executable} -m mecsim list algorithms | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.count("\n") == 1 and "internal error" not in done.stderr
