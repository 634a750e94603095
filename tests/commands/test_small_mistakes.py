"""Small mistakes a new user makes get a line that says what to write (issue 51, item 8):
a ``--set`` whose value came loose, a participation given as a percentage or a count,
``--resume`` of a run that already finished."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_describe_gives_an_array_of_tables_a_hint_that_works(capsys):
    assert main(["describe", "section", "network.cells"]) == 0
    shown = capsys.readouterr().out.splitlines()[1]
    assert "--set 'network.cells=[{KEY=VALUE, ...}, ...]'" in shown
    assert "network.cells.KEY" not in shown  # the old hint, which mecsim refuses:
    assert main(["validate", QUICKSTART, "--set", "network.cells.x_m=0"]) == 2
    capsys.readouterr()
    assert main(["describe", "section", "network.uplink"]) == 0  # a table: its keys one by one
    assert "(--set network.uplink.KEY=VALUE)" in capsys.readouterr().out


def test_report_without_out_writes_its_html_and_plots_beside_the_first_run(
    tmp_path, capsys, caplog
):
    run = tmp_path / "run"
    assert main(["run", QUICKSTART, *QUICK, "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    printed = capsys.readouterr()
    folder = tmp_path / "run-report"
    assert "report" in printed.out.lower()  # the tables, as before
    assert f"wrote {folder}" in caplog.text  # where the HTML and the plots went
    assert (folder / "report.html").stat().st_size > 0 and (folder / "report.md").is_file()
    assert main(["report", str(run)]) == 0  # the next one takes the next free name
    assert (tmp_path / "run-report-2" / "report.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run-report", "run-report-2"]


def test_a_missing_option_is_named_first_not_under_a_wall_of_usage(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "mecsim compare: error: the following arguments are required: --out "
        "(mecsim compare -h lists the options)"
    ]
