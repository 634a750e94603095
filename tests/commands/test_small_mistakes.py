"""Small mistakes a new user makes get a line that says what to write (issue 51, item 8):
a ``--set`` whose value came loose, a participation given as a percentage or a count,
``--resume`` of a run that already finished."""

from __future__ import annotations

from pathlib import Path

from mecsim.commands.cli import main

QUICKSTART = str(Path(__file__).parents[2] / "scenarios" / "quickstart.toml")
QUICK = ["--set", "protocol.rounds=2", "--set", "execution.cost_only=true", "--no-progress"]


def test_a_set_whose_value_came_loose_says_how_to_write_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", QUICKSTART, "--set", "protocol.rounds", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --set: 'protocol.rounds' has no value; write --set protocol.rounds=5"]
    assert not out.exists()


def test_a_participation_above_one_suggests_the_fraction_and_the_count(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", QUICKSTART, "--set", "protocol.participation=10", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "protocol.participation: a fraction in (0, 1], got 10" in err
    assert "write 0.1" in err and "clients_per_round = 10" in err
    assert not out.exists()


def test_resuming_a_finished_run_says_it_is_finished(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", QUICKSTART, *QUICK, "--out", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["run", QUICKSTART, *QUICK, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a finished run, nothing to continue" in err[0]
    assert sorted(p.name for p in out.iterdir()) == before  # untouched
