"""A newcomer's first hour: threads, sweeps that do what they say, the Python API, help."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import mecsim
import mecsim.common.threads
from mecsim.commands.cli import main
from mecsim.common.errors import MecsimError

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "scenarios" / "quickstart.toml")
COST_ONLY = ["execution.cost_only=true", "clients.num_samples=20", "protocol.rounds=2"]


# --- 1. threads ------------------------------------------------------------------------
def test_execution_threads_reaches_torch_and_summary(tiny, tmp_path):
    before = torch.get_num_threads()
    try:
        result = mecsim.run(tiny, [*COST_ONLY, "execution.threads=1"], out=tmp_path / "run")
        assert torch.get_num_threads() == 1
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["threads"] == result.summary["threads"] == 1
        assert summary["threads_setting"] == 1
    finally:
        torch.set_num_threads(before)


def test_auto_threads_never_exceed_the_idle_cpus_nor_the_workers_share(monkeypatch):
    monkeypatch.setattr(mecsim.common.threads, "usable_cpus", lambda: 8)
    assert mecsim.common.threads.choose_threads("auto", idle=8.0) == 8
    assert mecsim.common.threads.choose_threads("auto", idle=2.6) == 3  # one busy process: 2.6 idle
    assert mecsim.common.threads.choose_threads("auto", idle=0.2) == 1  # at least one
    monkeypatch.setattr(mecsim.common.threads, "workers", 4)
    assert mecsim.common.threads.choose_threads("auto", idle=8.0) == 2
    assert mecsim.common.threads.choose_threads(3, idle=0.0) == 3  # a number is taken as it is


def test_idle_cpus_come_from_two_samples_of_the_cpu_counters(monkeypatch):
    samples = iter([(100, 1000), (150, 1100)])  # (idle, total) jiffies: half idle
    monkeypatch.setattr(mecsim.common.threads.os, "cpu_count", lambda: 4)
    idle = mecsim.common.threads.idle_cpus(read=lambda: next(samples), sample_s=0.0)
    assert idle == pytest.approx(2.0)


def test_a_thread_count_outside_its_range_is_refused_in_one_line(tiny):
    with pytest.raises(MecsimError, match="execution.threads: 0: give a count"):
        mecsim.run(tiny, [*COST_ONLY, "execution.threads=0"], write=False)


# --- 3. sweeps and baselines ---------------------------------------------------------
def test_a_command_line_sweep_replaces_the_files_runs_and_says_so(tmp_path, caplog):
    import tomli_w

    data = {
        "name": "withruns",
        "data": {"dataset": "digits"},
        "model": {"name": "cnn-small"},
        "algorithm": {"name": "fedavg", "steps": 1},
        "clients": {"count": 3},
        "protocol": {"rounds": 1},
        "execution": {"cost_only": True},
        "output": {"progress": False},
        "compare": {"runs": [{"algorithm.name": "fedavg"}, {"algorithm.name": "fedprox"}]},
    }
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(data))
    with caplog.at_level("INFO", logger="mecsim"):
        code = main(
            [
                "compare",
                "--scenario",
                str(path),
                "--sweep",
                "algorithm.name=fedavg,local",
                "--out",
                str(tmp_path / "c"),
            ]
        )
    assert code == 0  # was: "points ... are the same run"
    assert "replaces the scenario's [compare] sweep and its 2 [[compare.runs]]" in caplog.text
    assert sorted(p.name for p in (tmp_path / "c" / "runs").iterdir()) == [
        "algorithm=fedavg",
        "algorithm=local",
    ]


@pytest.fixture(scope="module")
def two_runs(tiny_module, tmp_path_factory):
    root = tmp_path_factory.mktemp("two")
    for algorithm in ("fedavg", "fedprox"):
        mecsim.run(
            copy.deepcopy(tiny_module),
            [*COST_ONLY, f"algorithm.name={algorithm}"],
            out=root / algorithm,
        )
    return [root / "fedavg", root / "fedprox"]


@pytest.mark.parametrize(
    "baseline, says",
    [
        ("algorithm=fedavg", "'algorithm' is no setting of these runs; choose one of"),
        ("algorithm.name=ditto", "no run has algorithm.name = 'ditto'; the runs have fedavg"),
    ],
)
def test_a_baseline_that_matches_nothing_is_refused_naming_the_choices(
    two_runs, tmp_path, capsys, baseline, says
):
    runs = [str(r) for r in two_runs]
    assert main(["compare", *runs, "--out", str(tmp_path / "c"), "--baseline", baseline]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_cost_only_compare_prints_time_bytes_and_energy(two_runs, tmp_path, capsys):
    assert main(["compare", *map(str, two_runs), "--out", str(tmp_path / "c")]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header == ["run", "sim_time_s", "bytes_up", "bytes_down", "energy_j"]


# --- 6. the Python API ----------------------------------------------------------------
def test_load_reads_a_run_directory_back_as_the_run_returned_it(tiny, tmp_path):
    result = mecsim.run(tiny, COST_ONLY, out=tmp_path / "run")
    loaded = mecsim.load(tmp_path / "run")
    for name in ("events", "rounds", "clients"):
        expected = getattr(result, name).reset_index(drop=True)
        got = getattr(loaded, name).reset_index(drop=True)
        assert list(got.columns) == list(expected.columns)
        assert len(got) == len(expected)
    assert loaded.events["bytes"].sum() == result.events["bytes"].sum()
    assert loaded.summary["sim_time_s"] == pytest.approx(result.summary["sim_time_s"])
    assert loaded.scenario.algorithm.name == result.scenario.algorithm.name
    assert loaded.run_dir == tmp_path / "run"


def test_compare_and_sweep_return_the_comparison_table(two_runs, tmp_path):
    table = mecsim.compare(two_runs, targets=[0.5])
    assert len(table) == 2 and {"sim_time_s", "pm_time_0.5", "energy_j"} <= set(table.columns)
    swept = mecsim.sweep(
        QUICKSTART,
        {"algorithm.name": ["fedavg", "fedprox"]},
        out=tmp_path / "sweep",
        overrides=["clients.count=3", *COST_ONLY],
        seeds=[0, 1],
    )
    assert len(swept) == 4 and set(swept["seed"]) == {0, 1}
    assert (tmp_path / "sweep" / "comparison" / "compare.csv").is_file()


def test_load_of_a_folder_that_is_not_a_run_is_one_clear_error(tmp_path):
    with pytest.raises(MecsimError, match="not a mecsim run directory"):
        mecsim.load(tmp_path)


# --- 5 and 10. help, accuracy curve ------------------------------------------------------
def test_help_lists_every_command(capsys):
    from mecsim.commands.parser import build_parser as _parser

    parser = _parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert all(name in text.split("Commands:", 1)[1].splitlines()[0] for name in commands)
    assert {"run", "validate", "compare", "report", "check-run", "describe", "list"} <= set(
        commands
    )


def test_the_accuracy_curve_is_read_at_the_rounds_tables_round(tiny):
    curve = "execution.accuracy_curve=[[0, 0.1], [4, 0.9]]"
    rounds = mecsim.run(
        tiny, ["execution.cost_only=true", "protocol.rounds=5", curve], write=False
    ).rounds
    expected = np.interp(rounds["round"], [0, 4], [0.1, 0.9])
    np.testing.assert_allclose(rounds["generic_acc"], expected)
    assert rounds["generic_acc"].iloc[0] == pytest.approx(0.1)


def test_cost_only_refuses_an_algorithm_whose_bytes_come_from_training():
    with pytest.raises(MecsimError, match="execution.cost_only: algorithm 'kapc_bls' chooses"):
        mecsim.run(
            ROOT / "scenarios" / "kapc_mnist5k.toml",
            ["algorithm.name=kapc_bls", "execution.cost_only=true", "protocol.rounds=1"],
            write=False,
        )


# --- a checkout folder named mecsim ------------------------------------------------------


def test_python_started_beside_a_checkout_named_mecsim_gets_the_installed_package(tmp_path):
    """Python run from the folder holding a checkout called ``mecsim`` found the checkout
    as a namespace package (``mecsim.run``: AttributeError); the checkout's root
    ``__init__.py`` hands over to the installed package, or says what to do."""
    import shutil
    import subprocess
    import sys

    checkout = tmp_path / "mecsim"
    checkout.mkdir()
    root = Path(__file__).resolve().parents[2]
    if (root / "__init__.py").is_file():
        shutil.copy(root / "__init__.py", checkout / "__init__.py")
    code = "import mecsim; print(mecsim.__file__); print(callable(mecsim.run))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    where, runs = done.stdout.split()
    assert Path(where).resolve() == (root / "mecsim" / "__init__.py").resolve() and runs == "True"
    bare = subprocess.run(  # no site-packages: no installed mecsim to hand over to
        [sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert bare.returncode == 1
    last = bare.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: 'import mecsim' found the checkout folder")
    assert "pip install -e ." in last


# --- 6. the tutorial -------------------------------------------------------------------
def tutorial_module() -> str:
    """The algorithm of docs/writing-an-algorithm.md, as a reader would copy it."""
    text = (ROOT / "docs" / "writing-an-algorithm.md").read_text()
    blocks = text.split("```python\n")[1:]
    assert len(blocks) == 1, "the tutorial has one module"
    return blocks[0].split("```", 1)[0]


@pytest.fixture
def forget_tutorial():
    import sys

    yield
    from mecsim.algorithms import ALGORITHMS

    if "fedavg_ft" in ALGORITHMS.names():
        ALGORITHMS.remove("fedavg_ft")
    sys.modules.pop("fedavg_ft", None)


def test_the_tutorial_algorithm_passes_mecsim_check(tmp_path, capsys, forget_tutorial):
    """A plug-in written from docs/writing-an-algorithm.md alone: no dispatch on task
    names, and every conformance check passes under every protocol."""
    code = tutorial_module()
    assert "task.name" not in code
    path = tmp_path / "fedavg_ft.py"
    path.write_text(code)
    assert main(["check", "fedavg_ft", "--import", str(path)]) == 0
    out = capsys.readouterr().out
    assert "all passed" in out and "failed" not in out
