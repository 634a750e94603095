"""Every figure the CLI writes is fit to print (issue 51, item 6): no text runs off the
figure, every line of a multi-run plot is drawn in its own style (runs whose lines
coincide stay visible), intervals stay within their quantity's range, and an SVG lies
beside every PNG. The figures are collected as they are saved (plots.FIGURE_HOOKS)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import mecsim
from mecsim.analysis import plots
from mecsim.commands.cli import main

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
CURVE = "execution.accuracy_curve=[[0, 0.2], [1, 0.6]]"
COST_ONLY = ["execution.cost_only=true", "protocol.rounds=2", "output.progress=false"]


@pytest.fixture
def figures(monkeypatch):
    """(path, problems) of every figure saved while the test runs."""
    seen: list[tuple[Path, list[str]]] = []
    monkeypatch.setattr(
        plots, "FIGURE_HOOKS", [lambda fig, path: seen.append((path, plots.figure_problems(fig)))]
    )
    return seen


def _fit(figures, count: int) -> None:
    assert len(figures) >= count
    unfit = [(path.name, problems) for path, problems in figures if problems]
    assert not unfit


def _svg_beside_png(folder: Path) -> None:
    pngs = sorted(folder.glob("*.png"))
    assert pngs and all(p.with_suffix(".svg").is_file() for p in pngs)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.toml")), ids=lambda p: p.stem)
def test_each_shipped_scenarios_accuracy_plot_fits_and_names_what_ran(path, tmp_path, figures):
    overrides = [*COST_ONLY, CURVE, "clients.num_samples=50"]
    if path.stem.startswith("persfl"):
        overrides.append("algorithm.fl_rounds=1")
    out = tmp_path / "algorithm=kapc_bls__mu=0.3__search=literal__seed=12"  # a sweep's name
    result = mecsim.run(path, overrides, out=out)
    _fit(figures, 1)
    assert (out / "accuracy.png").is_file() and (out / "accuracy.svg").is_file()
    svg = (out / "accuracy.svg").read_text()
    assert f"{result.scenario.algorithm.name} / {result.scenario.protocol.kind}" in svg
    assert f"scenario {result.scenario.name}" in svg and out.name[:20] in svg


@pytest.fixture(scope="module")
def bls_runs(tiny_module, tmp_path_factory):
    """KAPC and BLS at mu 0.3 and 0.7, whose uploaded depths coincide on the tiny model."""
    root = tmp_path_factory.mktemp("bls")
    layers = ["algorithm.name=kapc_bls", "algorithm.steps=2", "protocol.rounds=3"]
    dirs = []
    for name, extra in (("kapc", ["algorithm.name=kapc"]), ("mu03", ["algorithm.mu=0.3"]),
                        ("mu07", ["algorithm.mu=0.7"])):  # fmt: skip
        mecsim.run(copy.deepcopy(tiny_module), [*layers, *extra], out=root / name)
        dirs.append(str(root / name))
    return dirs


def test_the_report_and_comparison_figures_fit_and_coinciding_lines_stay_visible(
    bls_runs, tmp_path, figures
):
    assert main(["report", *bls_runs, "--out", str(tmp_path / "r")]) == 0
    layers = pd.read_csv(tmp_path / "r" / "layers.csv", index_col="round")
    bls = [c for c in layers.columns if "kapc_bls" in c]
    assert len(bls) == 2 and np.array_equal(layers[bls[0]], layers[bls[1]])  # they coincide
    assert main(["compare", *bls_runs, "--targets", "0.1", "--out", str(tmp_path / "c")]) == 0
    names = {path.stem for path, _ in figures}
    assert {"layers", "curves", "gantt"} <= names
    _fit(figures, 3)
    _svg_beside_png(tmp_path / "r")
    _svg_beside_png(tmp_path / "c" / "comparison")
    _svg_beside_png(Path(bls_runs[0]))


def test_a_swept_metric_with_seeds_keeps_its_bars_within_range(tiny, tmp_path, figures):
    """A time's 95 % bar over two seeds that differ a lot reached below zero."""
    import tomli_w

    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(tiny))
    args = ["compare", "--scenario", str(scenario), "--sweep", "clients.bandwidth_mhz=0.05,1,20",
            "--seeds", "0,1", "--set", "algorithm.steps=1", "--set", "protocol.rounds=2",
            "--x", "clients.bandwidth_mhz", "--y", "sim_time_s", "--targets", "0.1",
            "--out", str(tmp_path / "c")]  # fmt: skip
    assert main(args) == 0
    table = pd.read_csv(tmp_path / "c" / "comparison" / "compare_seeds.csv")
    wide = table["sim_time_s_ci95"] > table["sim_time_s"]  # an unclipped bar would cross 0
    assert wide.any()
    assert {"metric", "curves"} <= {path.stem for path, _ in figures}
    _fit(figures, 3)
    _svg_beside_png(tmp_path / "c" / "comparison")


def test_the_checks_catch_what_they_look_for():
    """The fit checks are not vacuous: a title off the figure, two lines alike, a band
    below zero accuracy are each reported."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_title("a title far too long to fit in a figure three inches wide, " * 3)
    ax.plot([0, 1], [0.5, 0.6], "-", color="C0", label="a")
    ax.plot([0, 1], [0.5, 0.6], "-", color="C0", label="b")
    ax.set_ylabel("accuracy")
    ax.fill_between([0, 1], [-0.1, 0.2], [0.3, 0.4])
    problems = plots.figure_problems(fig)
    plt.close(fig)
    assert any("runs off the figure" in p for p in problems)
    assert any("drawn alike" in p for p in problems)
    assert any("outside [0, 1]" in p for p in problems)
