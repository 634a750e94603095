"""A study answered from compare.md and report.md (issue 51, items 2-4): one simulated time,
one energy and one byte unit across summary.json, compare and report; the new clients'
results, the backhaul and handovers in the tables; a default baseline that gives speedups
to a hierarchical study; TOML spellings in --baseline."""

from __future__ import annotations

import copy
import json
import re

import pandas as pd
import pytest

import mecsim
from mecsim.analysis.columns import describe_column
from mecsim.commands.cli import main

FAST = ["algorithm.steps=2", "protocol.rounds=4"]
EDGES = [
    "network.cells=[{x_m=0, y_m=0}, {x_m=1000, y_m=0}]",
    'clients.x_m={dist="uniform", low=-300, high=1300}',
    "clients.y_m=0",
    "clients.count=6",
    "protocol.kind=hierarchical",
    "network.backhaul.energy_nj_per_bit=50",
    "network.backhaul.latency_ms=12",
]


@pytest.fixture(scope="module")
def hierarchical(tiny_module, tmp_path_factory):
    """HierFAVG and the relay (FedAvg through the cloud), trained: two run directories."""
    root = tmp_path_factory.mktemp("edges")
    for relay in ("false", "true"):
        edge_rounds = 1 if relay == "true" else 2
        mecsim.run(copy.deepcopy(tiny_module), [*FAST, *EDGES, f"protocol.relay={relay}",
                   f"protocol.edge_rounds={edge_rounds}"], out=root / f"relay-{relay}")  # fmt: skip
    return [root / "relay-false", root / "relay-true"]


@pytest.fixture(scope="module")
def newcomers(tiny_module, tmp_path_factory):
    """Runs with two new clients (of six) under FedAvg and Ditto."""
    root = tmp_path_factory.mktemp("newcomers")
    for name in ("fedavg", "ditto"):
        mecsim.run(copy.deepcopy(tiny_module),
                   ["protocol.rounds=2", "clients.count=6", "evaluation.new_clients=2",
                    f"algorithm.name={name}"], out=root / name)  # fmt: skip
    return [root / "fedavg", root / "ditto"]


def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_sim_time_is_the_last_rounds_last_event_in_summary_and_compare(hierarchical):
    """compare took the last t_personal, which comes before the cloud's backhaul."""
    table = mecsim.compare(hierarchical, targets=[0.5])
    for run_dir, (_, row) in zip(hierarchical, table.iterrows(), strict=True):
        events = pd.read_parquet(run_dir / "events.parquet")
        rounds = pd.read_parquet(run_dir / "rounds.parquet")
        backhaul = events[events["role"] == "backhaul"]
        assert len(backhaul) and rounds["t_personal"].max() < backhaul["t_end"].max()
        last = events.loc[events["round"] <= rounds["round"].max(), "t_end"].max()
        assert row["sim_time_s"] == _summary(run_dir)["sim_time_s"] == last


def test_energy_is_one_total_with_idle_and_backhaul_as_their_own_columns(hierarchical):
    table = mecsim.compare(hierarchical, targets=[0.5])
    for run_dir, (_, row) in zip(hierarchical, table.iterrows(), strict=True):
        energy = _summary(run_dir)["energy_j"]
        events = pd.read_parquet(run_dir / "events.parquet")
        backhaul = events[events["role"] == "backhaul"]
        assert row["energy_j"] == pytest.approx(energy["total"], rel=1e-12)
        assert row["energy_j"] == pytest.approx(events["energy_j"].sum() + energy["client_idle"])
        assert row["idle_energy_j"] == pytest.approx(energy["client_idle"], rel=1e-12)
        assert row["idle_energy_j"] > 0
        # 50 nJ a bit over the backhaul: a hand calculation from its bytes
        expected = 8 * backhaul["bytes"].sum() * 50e-9
        assert row["backhaul_energy_j"] == pytest.approx(expected, rel=1e-12)
        assert energy["backhaul"] == pytest.approx(expected, rel=1e-12)
        assert expected > 0


def test_a_hierarchical_study_gets_speedups_over_its_first_run_and_says_so(
    hierarchical, tmp_path, caplog
):
    caplog.set_level("INFO", logger="mecsim")
    out = tmp_path / "c"
    assert main(["compare", *map(str, hierarchical), "--targets", "0.1", "--out", str(out)]) == 0
    # the first swept setting at the first run's value: HierFAVG's 2 edge rounds
    assert "speedups over protocol.edge_rounds=2, every other setting equal" in caplog.text
    table = pd.read_csv(out / "comparison" / "compare.csv")
    assert (table["baseline"] == table["run"].iloc[0]).all()
    assert table["pm_speedup_0.1"].iloc[0] == 1.0
    assert table["pm_speedup_0.1"].notna().all()
    markdown = (out / "comparison" / "compare.md").read_text()
    assert "Speedups are over the run with `protocol.edge_rounds=2`" in markdown
    assert "## Edges: backhaul and handovers" in markdown
    assert "MiB backhaul" in markdown and "backhaul J" in markdown
    assert "handovers/round" in (out / "comparison" / "report.html").read_text()


@pytest.mark.parametrize("spelling", ["protocol.relay=true", "protocol.relay=True"])
def test_baseline_values_are_read_as_toml_as_set_reads_them(hierarchical, tmp_path, spelling):
    out = tmp_path / "c"
    args = ["compare", *map(str, hierarchical), "--targets", "0.1", "--baseline", spelling]
    assert main([*args, "--out", str(out)]) == 0
    table = pd.read_csv(out / "comparison" / "compare.csv")
    relay = table["run"].str.contains("relay=True")
    assert (table["baseline"] == table.loc[relay, "run"].iloc[0]).all()


def test_new_clients_results_are_in_compare_and_report(newcomers, tmp_path):
    out = tmp_path / "c"
    assert main(["compare", *map(str, newcomers), "--targets", "0.1", "--out", str(out)]) == 0
    table = pd.read_csv(out / "comparison" / "compare.csv")
    for run_dir, (_, row) in zip(newcomers, table.iterrows(), strict=True):
        summary = _summary(run_dir)
        assert row["new_clients"] == 2
        assert row["new_client_acc"] == pytest.approx(summary["new_client_acc"], rel=1e-12)
        assert row["new_client_acc_std"] == pytest.approx(summary["new_client_acc_std"])
        accs = [float(a) for a in row["new_client_accs"].split(";")]
        assert accs == pytest.approx(summary["new_client_accs"], rel=1e-5)
        assert row["new_client_bytes_down"] == summary["new_client_bytes_down"] > 0
        assert row["new_client_bytes_down_per_client"] == summary["new_client_bytes_down"] / 2
        assert row["new_client_flops_per_client"] == summary["new_client_flops"] / 2
        assert row["new_client_join_s"] == pytest.approx(summary["new_client_join_s"])
    markdown = (out / "comparison" / "compare.md").read_text()
    assert "## New clients" in markdown and f"{table['new_client_acc'][0]:.4f}" in markdown
    report = tmp_path / "r"
    assert main(["report", *map(str, newcomers), "--out", str(report)]) == 0
    text = (report / "report.md").read_text()
    assert "## New clients" in text and f"{table['new_client_acc'][1]:.4f}" in text
    assert "## Time, energy and bytes" in text


def test_every_markdown_table_counts_bytes_in_mib_and_every_column_is_described(
    hierarchical, newcomers, tmp_path
):
    runs = [*map(str, hierarchical), *map(str, newcomers)]
    assert main(["compare", *runs, "--targets", "0.1", "--out", str(tmp_path / "c")]) == 0
    assert main(["report", *runs, "--out", str(tmp_path / "r")]) == 0
    for path in (tmp_path / "c" / "comparison" / "compare.md", tmp_path / "r" / "report.md"):
        text = path.read_text()
        headers = [line for line in text.splitlines() if line.startswith("| run")]
        assert headers and not any(re.search(r"\bMB\b", h) for h in headers), path
        assert "None" not in text
    table = pd.read_csv(tmp_path / "c" / "comparison" / "compare.csv")
    swept = {c for c in table.columns if "." in c and not c[0].isdigit()} | {"seed"}
    undescribed = [c for c in table.columns if c not in swept and describe_column(c) is None]
    assert not undescribed
    glossary = (tmp_path / "c" / "comparison" / "compare.md").read_text().split("## Columns")[1]
    assert "`new_client_bytes_down`: bytes the new clients received to join, summed" in glossary


def test_an_edge_round_repeats_the_last_cloud_rounds_generic_accuracy(hierarchical):
    """As docs/algorithms.md says: the generic model evaluated is the cloud's latest."""
    rounds = pd.read_parquet(hierarchical[0] / "rounds.parquet")
    assert rounds["level"].tolist() == ["edge", "cloud", "edge", "cloud"]
    assert rounds["generic_acc"][2] == rounds["generic_acc"][1]
    assert rounds["generic_acc"][3] != rounds["generic_acc"][2]
