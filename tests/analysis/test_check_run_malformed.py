"""``mecsim check-run`` on an edited run directory (issue 49): a malformed table, summary or
resolved scenario is a failed check (exit 1, one line), never a traceback."""

from __future__ import annotations

import copy
import json
import re
import shutil

import pandas as pd
import pytest

import mecsim
from mecsim.commands.cli import main

COST_ONLY = ["execution.cost_only=true", "clients.num_samples=20", "protocol.rounds=2"]


@pytest.fixture(scope="module")
def run_dir(tiny_module, tmp_path_factory):
    out = tmp_path_factory.mktemp("check_run") / "run"
    mecsim.run(copy.deepcopy(tiny_module), COST_ONLY, out=out)
    return out


def _summary_energy(value):
    def edit(path):
        data = json.loads(path.read_text())
        data["energy_j"] = value
        path.write_text(json.dumps(data))

    return edit


def _parquet(change):
    def edit(path):
        frame = pd.read_parquet(path)
        change(frame)
        frame.to_parquet(path)

    return edit


def _toml(pattern, replacement):
    def edit(path):
        text, count = re.subn(pattern, replacement, path.read_text(), count=1, flags=re.M)
        assert count == 1, pattern
        path.write_text(text)

    return edit


EDITS = {
    "summary energy a word": ("summary.json", _summary_energy("lots")),
    "summary energy a list": ("summary.json", _summary_energy([1, 2])),
    "energy stored as text": (
        "events.parquet",
        _parquet(lambda f: f.__setitem__("energy_j", f["energy_j"].astype(str))),
    ),
    "a power that is a word": (
        "scenario.resolved.toml",
        _toml(r"^tx_power_dbm = .*$", 'tx_power_dbm = "loud"'),
    ),
    "cells that are numbers": ("scenario.resolved.toml", _toml(r"^cells = .*$", "cells = [1, 2]")),
    "a backhaul rate that is a word": (
        "scenario.resolved.toml",
        _toml(r"^rate_mbps = .*$", 'rate_mbps = "fast"'),
    ),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_run_directory_is_a_failed_check_in_one_line(run_dir, tmp_path, capsys, edit):
    target = tmp_path / "run"
    shutil.copytree(run_dir, target)
    name, change = EDITS[edit]
    change(target / name)
    code = main(["check-run", str(target)])
    captured = capsys.readouterr()
    assert code == 1, captured
    assert "Traceback" not in captured.out + captured.err
    failed = [line for line in captured.out.splitlines() if "FAIL" in line]
    assert len(failed) == 1 and failed[0].startswith("readable")


def test_an_intact_run_directory_passes_and_an_extra_column_is_ignored(run_dir, tmp_path):
    assert main(["check-run", str(run_dir)]) == 0
    target = tmp_path / "run"
    shutil.copytree(run_dir, target)
    _parquet(lambda f: f.insert(len(f.columns), "on_time", True))(target / "rounds.parquet")
    assert main(["check-run", str(target)]) == 0
