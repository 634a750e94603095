"""docs/writing-a-policy.md works as written: its plug-in registers, describes, runs with
one --set, and passes ``mecsim check``."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from mecsim.commands.cli import main
from mecsim.policies.scheduling import SCHEDULERS

DOC = Path(__file__).parents[2] / "docs" / "writing-a-policy.md"


def plugin_source() -> str:
    text = DOC.read_text()
    after = text.split("Save as `least_energy.py`:", 1)[1]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def test_the_tutorials_policy_describes_runs_and_passes_the_conformance_suite(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "least_energy.py").write_text(plugin_source())
    scenario = Path(__file__).parents[2] / "scenarios" / "quickstart.toml"
    try:
        assert main(["describe", "scheduler", "least_energy", "--import", "least_energy.py"]) == 0
        assert "weight" in capsys.readouterr().out
        settings = ["scheduling.policy=least_energy", "protocol.participation=0.3",
                    "protocol.rounds=3", "execution.cost_only=true"]  # fmt: skip
        args = [
            "run",
            str(scenario),
            "--import",
            "least_energy.py",
            "--out",
            "run",
            "--no-progress",
        ]
        assert main([*args, *(x for s in settings for x in ("--set", s))]) == 0
        decisions = pd.read_parquet(tmp_path / "run" / "decisions.parquet")
        assert set(decisions["policy"]) == {"least_energy"} and len(decisions) == 18
        later = decisions[decisions["round"] > 0]
        assert later["value"].notna().all() and (later["value"] <= 0).all()
        capsys.readouterr()
        assert main(["check", "least_energy", "--import", "least_energy.py"]) == 0
        assert "5 checks of least_energy: all passed" in capsys.readouterr().out
    finally:
        SCHEDULERS.remove("least_energy")
