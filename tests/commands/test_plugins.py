"""Plug-ins: the extending guide's example algorithm through --import, and the entry-point group."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mecsim.commands.cli import main

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def readme_plugin() -> str:
    """The first Python block of the guide "Extending mecsim" (docs/extending.md)."""
    return re.search(r"```python\n(.*?)```", GUIDE.read_text(), re.S).group(1)


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """The guide's plug-in as a module in the working directory; forgotten afterwards, so
    tests that walk every algorithm never see it."""
    from mecsim.algorithms import ALGORITHMS

    (tmp_path / "readme_plugin.py").write_text(readme_plugin())
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    ALGORITHMS.remove("trimmed_mean")
    sys.modules.pop("readme_plugin", None)


def test_the_readme_example_is_short_and_complete():
    code = readme_plugin()
    assert len(code.strip().splitlines()) <= 40
    compile(code, "my_plugin.py", "exec")


def test_the_readme_algorithm_runs_from_the_command_line(plugin_dir, tiny, capsys):
    import tomli_w

    path = plugin_dir / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    assert main(["describe", "algorithm", "trimmed_mean", "--import", "readme_plugin"]) == 0
    assert "share cut at each end" in capsys.readouterr().out
    args = ["run", str(path), "--import", "readme_plugin", "--set", "algorithm.name=trimmed_mean"]
    assert main(args + ["--set", "algorithm.trim=0.25", "--out", str(plugin_dir / "r")]) == 0
    rounds = pd.read_csv(plugin_dir / "r" / "rounds.csv")
    assert len(rounds) == 2 and rounds["generic_acc"].notna().all()
    events = pd.read_csv(plugin_dir / "r" / "events.csv")
    # the aggregate's FLOPs are the plug-in's closed form: P * (n * bit_length(n) + n)
    from mecsim.algorithms import ALGORITHMS

    algorithm = ALGORITHMS.get("trimmed_mean")
    assert algorithm.Settings().trim == 0.25
    params = pd.read_csv(plugin_dir / "r" / "clients.csv")["num_params"].iloc[0]
    aggregate = events[events["phase"] == "aggregate"]
    n = 4  # every client of the tiny scenario uploads each round
    assert (aggregate["flops"] == params * (n * n.bit_length() + n)).all()


def test_the_trimmed_mean_drops_the_extremes_per_coordinate(plugin_dir):
    import torch

    from mecsim.algorithms.base import Upload
    from mecsim.common.plugins import import_module

    module = import_module("readme_plugin")
    algorithm = module.TrimmedMean.__new__(module.TrimmedMean)
    algorithm.settings = module.TrimmedMeanSettings(trim=0.25)

    class Global:
        def merge(self, payload):
            return payload

    uploads = [Upload(c, {"w": torch.tensor([v, -v])}, 1) for c, v in enumerate([1.0, 2, 3, 100])]
    merged = algorithm.aggregate({"global": Global()}, uploads, None)["global"]
    assert merged["w"].tolist() == [2.5, -2.5]  # mean of the middle two, per coordinate


def test_a_missing_plugin_is_one_clear_line(tmp_path, capsys):
    assert main(["list", "algorithms", "--import", "no_such_plugin_module"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --import: cannot import 'no_such_plugin_module'")
    assert main(["list", "algorithms", "--import", str(tmp_path / "nope.py")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_installed_packages_register_through_the_entry_point_group(tmp_path):
    site = tmp_path / "site"
    (site / "readme_plugin_dist-0.1.dist-info").mkdir(parents=True)
    (site / "trim_plugin.py").write_text(readme_plugin())
    info = site / "readme_plugin_dist-0.1.dist-info"
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: readme-plugin-dist\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text("[mecsim.plugins]\ntrim = trim_plugin\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    listed = subprocess.run(
        [sys.executable, "-m", "mecsim", "list", "algorithms"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "trimmed_mean" in listed.stdout
