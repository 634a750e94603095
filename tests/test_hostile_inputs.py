"""Hostile or damaged run directories given to ``report`` and ``compare``: one line, exit 2."""

from __future__ import annotations

import copy
import json
import shutil

import pandas as pd
import pytest

import mecsim
from mecsim.cli import main

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
