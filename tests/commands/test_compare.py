"""Comparison tables: distinct labels, accuracy against bytes communicated."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

import mecsim
from mecsim.analysis.compare import compare_runs, distinguish, load_run
from mecsim.analysis.compare_markdown import render_markdown
from mecsim.commands.comparison import compare


@pytest.fixture(scope="module")
def two_bandwidths(tiny_module, tmp_path_factory):
    """Two COMET runs that differ only in the downlink's bandwidth (1 bit/s/Hz)."""
    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for mhz in (1, 5):
        out = root / f"bw{mhz}"
        overrides = [
            "algorithm.name=comet",
            "data.public_size=40",
            "network.preset=table5",
            f"network.downlink.bandwidth_mhz={mhz}",
            "execution.cost_only=true",
        ]
        mecsim.run(copy.deepcopy(tiny_module), overrides, out=out)
        dirs.append(out)
    return dirs


def test_runs_that_share_algorithm_and_protocol_get_distinct_labels(two_bandwidths, tmp_path):
    table = compare(two_bandwidths, [0.5], tmp_path / "cmp")
    assert table["run"].tolist() == [
        "comet / compute_and_wait (network.downlink.bandwidth_mhz=1.0)",
        "comet / compute_and_wait (network.downlink.bandwidth_mhz=5.0)",
    ]


def test_comparison_reports_bytes_per_direction_and_the_public_download(two_bandwidths):
    records = [load_run(d) for d in two_bandwidths]
    table = compare_runs(records, [0.5])
    summary = records[0].summary
    row = table.iloc[0]
    assert row["bytes_up_total"] == summary["bytes_up_total"] == 4 * 2 * 40 * 10 * 4
    assert row["public_bytes_down"] == 4 * 40 * 64 * 4
    assert row["bytes_down_total"] == row["public_bytes_down"] + table["bytes_down"].iloc[0]
    # five times the bandwidth: the public download takes a fifth of the time
    slow, fast = table["public_download_s"]
    assert slow / fast == pytest.approx(5)
    assert slow == pytest.approx(8 * row["public_bytes_down"] / 4 / 1e6)  # 1 Mbit/s, per client
    markdown = render_markdown(table, [0.5])
    assert "## Accuracy and communication" in markdown
    assert f"{row['public_bytes_down'] / 2**20:.3f}" in markdown  # MiB, as everywhere


def test_labels_stay_short_when_they_already_differ(two_bandwidths):
    records = [load_run(two_bandwidths[0])]
    table = compare_runs(records, [0.5])
    assert table["run"].tolist() == ["comet / compute_and_wait"]


def test_speedups_are_over_the_baseline_with_every_other_setting_equal(tiny_module, tmp_path):
    """Under a seed sweep, seed 2's wait-free run is compared with seed 2's compute-and-wait."""
    dirs = []
    for seed in (0, 2):
        for kind in ("compute_and_wait", "wait_free"):
            out = tmp_path / f"{kind}-{seed}"
            overrides = [
                f"seed={seed}",
                f"protocol.kind={kind}",
                "algorithm.name=ditto",
                "protocol.rounds=2",
            ]
            mecsim.run(copy.deepcopy(tiny_module), overrides, out=out)
            dirs.append(out)
    records = [load_run(d) for d in dirs]
    distinguish(records)
    table = compare_runs(records, [0.05])

    assert table["baseline"].tolist() == [table["run"][0]] * 2 + [table["run"][2]] * 2
    assert (table.loc[[0, 2], "pm_speedup_0.05"] == 1.0).all()
    expected = table["pm_time_0.05"][2] / table["pm_time_0.05"][3]
    assert table["pm_speedup_0.05"][3] == pytest.approx(expected)
    by_fedavg = compare_runs(records, [0.05], baseline="algorithm.name=fedavg")
    assert by_fedavg["pm_speedup_0.05"].isna().all()  # no such run: no speedup


def test_sweep_folders_are_named_from_the_swept_keys_and_seeds(tiny, tmp_path):
    import tomli_w

    from mecsim.commands.cli import main

    tiny["execution"] = {"cost_only": True}
    tiny["compare"] = {"sweep": {"clients.bandwidth_mhz": [1, 5]}, "seeds": [0, 1]}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))

    assert main(["compare", "--scenario", str(path), "--out", str(tmp_path / "cmp")]) == 0
    runs = sorted(p.name for p in (tmp_path / "cmp" / "runs").iterdir())
    assert runs == [
        "bandwidth_mhz=1__seed=0",
        "bandwidth_mhz=1__seed=1",
        "bandwidth_mhz=5__seed=0",
        "bandwidth_mhz=5__seed=1",
    ]
    table = pd.read_csv(tmp_path / "cmp" / "comparison" / "compare.csv")
    assert table["run"].nunique() == 4  # labels carry the differing keys

    seeds = pd.read_csv(tmp_path / "cmp" / "comparison" / "compare_seeds.csv")
    assert seeds["variant"].tolist() == [
        "fedavg / compute_and_wait (clients.bandwidth_mhz=1.0)",
        "fedavg / compute_and_wait (clients.bandwidth_mhz=5.0)",
    ]
    assert (seeds["n"] == 2).all()
    energy = table["energy_j"].to_numpy()[:2]  # bandwidth 1: seeds 0 and 1
    assert seeds["energy_j"][0] == pytest.approx(energy.mean())
    half = 12.706204736174707 * energy.std(ddof=1) / 2**0.5  # t(0.975, 1 dof)
    assert seeds["energy_j_ci95"][0] == pytest.approx(half)
    markdown = (tmp_path / "cmp" / "comparison" / "compare.md").read_text()
    assert "## Seeds: mean ± 95 % confidence half-width" in markdown


def test_two_sweep_points_that_are_one_run_are_refused(tiny, tmp_path, capsys):
    import tomli_w

    from mecsim.commands.cli import main

    tiny["compare"] = {"sweep": {"algorithm.lr": [0.1, 1e-1]}}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))

    assert main(["compare", "--scenario", str(path), "--out", str(tmp_path / "cmp")]) == 2
    assert "are the same run (lr=0.1)" in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()


@pytest.fixture(scope="module")
def bandwidth_sweep(tiny_module, tmp_path_factory):
    """A cost-only bandwidth sweep with two seeds, through the command line."""
    import tomli_w

    from mecsim.commands.cli import main

    root = tmp_path_factory.mktemp("bw")
    data = copy.deepcopy(tiny_module)
    data["execution"] = {"cost_only": True, "accuracy_curve": [[0, 0.1], [0.05, 0.9]]}
    path = root / "s.toml"
    path.write_text(tomli_w.dumps(data))
    args = ["compare", "--scenario", str(path), "--sweep", "clients.bandwidth_mhz=1,4"]
    args += ["--seeds", "0,1", "--x", "clients.bandwidth_mhz", "--y", "energy_j"]
    args += ["--format", "png,svg,pdf", "--targets", "0.5", "--out", str(root / "cmp")]
    assert main(args) == 0
    return root / "cmp" / "comparison"


def test_a_sweep_table_has_a_column_per_swept_key_and_seed_intervals(bandwidth_sweep):
    table = pd.read_csv(bandwidth_sweep / "compare.csv")
    assert table["clients.bandwidth_mhz"].tolist() == [1, 1, 4, 4]
    assert table["seed"].tolist() == [0, 1, 0, 1]
    assert {"gm_time_0.5", "gm_speedup_0.5", "pm_speedup_0.5"} <= set(table.columns)
    seeds = pd.read_csv(bandwidth_sweep / "compare_seeds.csv")
    assert seeds["clients.bandwidth_mhz"].tolist() == [1, 4] and "seed" not in seeds
    assert seeds["n"].tolist() == [2, 2]
    slow = table[table["clients.bandwidth_mhz"] == 1]["sim_time_s"]
    assert seeds["sim_time_s"][0] == pytest.approx(slow.mean())
    assert seeds["sim_time_s_ci95"][0] > 0
    # four times the uplink: less time on the air, so less transmit energy
    assert seeds["energy_j"][1] < seeds["energy_j"][0]


def test_figures_come_in_every_requested_format(bandwidth_sweep):
    for stem in ("curves", "gantt", "metric"):
        for fmt in ("png", "svg", "pdf"):
            assert (bandwidth_sweep / f"{stem}.{fmt}").stat().st_size > 1000
    curves = (bandwidth_sweep / "curves.svg").read_text()
    assert "(n=2, assumed accuracy) -->" in curves  # cost-only: the assumed curve, so labelled
    svg = (bandwidth_sweep / "metric.svg").read_text()
    assert "<!-- clients.bandwidth_mhz -->" in svg  # the x label
    # one line: the runs differ only in the swept key and the seed (not one per run)
    assert svg.count("<!-- fedavg / compute_and_wait -->") == 1
    assert svg.count("<!-- fedavg / compute_and_wait") == 1


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--x", "clients.bandwith_mhz"], "did you mean clients.bandwidth_mhz?"),
        (["--x", "clients.bandwidth_mhz", "--y", "speed"], "'speed' is not a comparison column"),
        (["--format", "png,gif"], "choose from png, svg, pdf"),
    ],
)
def test_figure_options_are_checked_before_any_run(tiny, tmp_path, capsys, option, message):
    import tomli_w

    from mecsim.commands.cli import main

    tiny["execution"] = {"cost_only": True}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    args = ["compare", "--scenario", str(path), "--sweep", "clients.bandwidth_mhz=1,4"]
    assert main(args + option + ["--out", str(tmp_path / "cmp")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()


def _events(rows):
    columns = ["round", "client", "phase", "t_start", "t_end"]
    return pd.DataFrame(rows, columns=columns)


def test_the_gantt_shows_the_clients_that_set_the_round_length_first():
    from mecsim.analysis.gantt import idle_spans, slowest_clients

    events = _events(
        [
            (0, 0, "download", 0.0, 1.0),
            (0, 0, "upload", 1.0, 2.0),
            (0, 1, "download", 0.0, 1.0),
            (0, 1, "upload", 4.0, 9.0),  # the straggler of round 0
            (0, 2, "upload", 0.0, 3.0),
            (0, -1, "aggregate", 9.0, 9.5),  # the server is never a lane
            (1, 0, "upload", 10.0, 11.0),
            (1, 2, "upload", 10.0, 12.0),
        ]
    )
    # lateness from each round's first event: client 1: 9; client 2: (3 + 2) / 2; client 0: 1.5
    assert slowest_clients(events, [0, 1], 2) == [1, 2]
    assert slowest_clients(events, [1], 5) == [2, 0]
    assert idle_spans([(1.0, 2.0), (1.5, 3.0), (5.0, 6.0)], 0.0, 8.0) == [
        (0.0, 1.0),
        (3.0, 5.0),
        (6.0, 8.0),
    ]
    assert idle_spans([(0.0, 9.0)], 0.0, 8.0) == []


def test_a_seed_band_averages_curves_held_between_evaluations():
    import numpy as np

    from mecsim.analysis.figures import step_at

    grid = np.array([0.5, 1.0, 2.5, 4.0])
    held = step_at(np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.5, 0.7]), grid)
    np.testing.assert_allclose(held, [np.nan, 0.1, 0.5, 0.7])
