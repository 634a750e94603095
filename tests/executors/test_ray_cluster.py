"""The Ray executor and Ray sweeps on a real multi-node cluster (several raylets on
this machine, ``ray.cluster_utils.Cluster``): jobs spread over the nodes, tables
equal to the serial executor's, a node removed mid-run, the whole cluster lost
and the run resumed on a new one.

Marked ``ray`` (``pytest -m "not ray"`` skips them); skipped without Ray.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator

import pandas as pd
import pytest
import tomli_w

import mecsim
from mecsim.commands import ray_sweeps
from mecsim.commands.cli import main
from mecsim.common.errors import ExecutorLost
from mecsim.executors.ray_backend import RayExecutor

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.ray

WORKERS = 3
QUICK = {"protocol.rounds": 3, "clients.count": 9, "algorithm.epochs": 1}
"""The quickstart, shortened for CI."""


class Nodes:
    """A head with no CPUs (so every job runs on a worker node) and worker nodes of one
    CPU each, every one its own raylet."""

    def __init__(self, workers: int) -> None:
        self.cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        self.workers = [self.cluster.add_node(num_cpus=1) for _ in range(workers)]
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, include_dashboard=False, log_to_driver=False)

    @property
    def address(self) -> str:
        return self.cluster.address

    def ids(self) -> set[str]:
        return {node.node_id for node in self.workers}

    def add(self) -> None:
        self.workers.append(self.cluster.add_node(num_cpus=1))
        self.cluster.wait_for_nodes()

    def remove(self, count: int = 1) -> None:
        for _ in range(count):
            self.cluster.remove_node(self.workers.pop(0))

    def close(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def nodes() -> Iterator[Nodes]:
    if ray.is_initialized():
        ray.shutdown()
    cluster = Nodes(WORKERS)
    yield cluster
    cluster.close()


def serial(scenario: str, settings: dict) -> mecsim.RunResult:
    """The reference run: the serial executor on one thread, as each actor trains."""
    return mecsim.run(
        scenario, {**settings, "execution.threads": 1}, executor="serial", write=False
    )


def on(nodes: Nodes, inner: str = "serial") -> dict:
    """Settings that run a scenario's jobs on ``nodes``; the serial inner executor
    trains exactly as the serial executor does, whatever the chunks."""
    return {
        "execution.executor": "ray",
        "execution.ray_address": nodes.address,
        "execution.ray_inner": inner,
    }


def assert_same_tables(a: mecsim.RunResult, b: mecsim.RunResult) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    wall = [c for c in a.rounds.columns if c.startswith("wall")]
    pd.testing.assert_frame_equal(a.rounds.drop(columns=wall), b.rounds.drop(columns=wall))


@pytest.fixture(scope="module")
def quickstart_serial() -> mecsim.RunResult:
    return serial("scenarios/quickstart.toml", QUICK)


def test_quickstart_jobs_run_on_every_node_and_equal_the_local_tables(nodes, quickstart_serial):
    # the default inner executor (batched): each actor stacks its chunk of 3 contiguous
    # jobs, so the accuracies are those of the local batched executor in groups of 3 (a
    # grouped convolution need not round as the per-client one does: oneDNN in torch
    # 2.14 does not); times, bytes and FLOPs are the serial run's
    result = mecsim.run("scenarios/quickstart.toml", {**QUICK, **on(nodes, "batched")}, write=False)
    local = mecsim.run(
        "scenarios/quickstart.toml",
        {**QUICK, "execution.threads": 1, "execution.max_batch_clients": 3},
        executor="batched",
        write=False,
    )

    report = result.summary["executor_report"]
    per_node = report["jobs_per_node"]
    assert set(per_node) == nodes.ids()  # the head has no CPU: every job ran on a worker
    assert sum(per_node.values()) == QUICK["clients.count"] * QUICK["protocol.rounds"]
    assert min(per_node.values()) > 0
    assert report["retried_jobs"] == report["lost_workers"] == 0
    pd.testing.assert_frame_equal(quickstart_serial.events, result.events)
    assert_same_tables(local, result)
    json.dumps(result.summary)  # the report is summary.json material


def test_a_wait_free_scenario_over_the_cluster_equals_the_serial_run(nodes):
    scenario = "scenarios/scd_waitfree_digits.toml"
    settings = {"protocol.rounds": 2, "clients.count": 6}
    reference = serial(scenario, settings)
    distributed = mecsim.run(scenario, {**settings, **on(nodes)}, write=False)

    assert len(distributed.summary["executor_report"]["jobs_per_node"]) > 1
    assert_same_tables(reference, distributed)


def remove_before_round(nodes: Nodes, monkeypatch, round_: int, count: int) -> list[int]:
    """Remove ``count`` worker nodes when the executor is handed round ``round_``'s jobs;
    return the list the rounds that saw a removal are appended to."""
    original = RayExecutor.run
    removed: list[int] = []

    def run(self, jobs):
        if jobs and jobs[0].round == round_ and not removed:
            nodes.remove(count)
            removed.append(round_)
        return original(self, jobs)

    monkeypatch.setattr(RayExecutor, "run", run)
    return removed


def test_a_node_removed_in_round_2_of_5_loses_and_duplicates_no_job(
    nodes, quickstart_serial, monkeypatch
):
    nodes.add()  # the node this test removes; the others stay for the next tests
    settings = {**QUICK, "protocol.rounds": 5}
    undisturbed = serial("scenarios/quickstart.toml", settings)
    removed = remove_before_round(nodes, monkeypatch, round_=2, count=1)

    result = mecsim.run("scenarios/quickstart.toml", {**settings, **on(nodes)}, write=False)

    assert removed == [2]
    report = result.summary["executor_report"]
    assert report["lost_workers"] == 1
    assert report["retried_jobs"] > 0
    assert sum(report["jobs_per_node"].values()) == 9 * 5  # each job counted once
    assert_same_tables(undisturbed, result)


def sweep_tables(out) -> dict[str, pd.DataFrame]:
    """Every table of a sweep's runs and its comparison, wall-clock columns dropped."""
    tables = {}
    for path in sorted(out.rglob("*")):
        if path.suffix in (".parquet", ".csv"):
            frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
            keep = [c for c in frame.columns if "wall" not in c]
            tables[str(path.relative_to(out))] = frame[keep]
    return tables


def test_a_sweep_on_the_cluster_writes_the_local_sweeps_tables_despite_a_lost_node(
    nodes, tiny, tmp_path, monkeypatch, caplog
):
    tiny["execution"] = {"threads": 1}
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(tiny))
    args = ["compare", "--scenario", str(scenario), "--sweep", "clients.bandwidth_mhz=1,5"]
    args += ["--seeds", "0,1"]
    assert main([*args, "--out", str(tmp_path / "local")]) == 0
    written = []
    original = ray_sweeps.write_point

    def write_then_lose_a_node(run_dir, files):
        original(run_dir, files)
        written.append(run_dir.name)
        if len(written) == 1:  # the other nodes are running points: one of them dies
            nodes.remove(1)

    monkeypatch.setattr(ray_sweeps, "write_point", write_then_lose_a_node)
    remote = tmp_path / "remote"
    assert main([*args, "--out", str(remote), "--ray", nodes.address]) == 0

    assert len(written) == 4
    local_tables, remote_tables = sweep_tables(tmp_path / "local"), sweep_tables(remote)
    assert len(local_tables) > 4 and set(local_tables) == set(remote_tables)
    for name, table in local_tables.items():
        pd.testing.assert_frame_equal(table, remote_tables[name], obj=name)

    shutil.rmtree(remote / "runs" / "bandwidth_mhz=5__seed=1")
    written.clear()
    with caplog.at_level(logging.INFO, logger="mecsim"):
        assert main([*args, "--out", str(remote), "--ray", nodes.address, "--resume"]) == 0
    assert written == ["bandwidth_mhz=5__seed=1"]
    assert "resume: 3 of 4 points already finished" in caplog.text
    again = sweep_tables(remote)
    for name, table in local_tables.items():
        pd.testing.assert_frame_equal(table, again[name], obj=name)


def test_a_lost_cluster_stops_at_the_checkpoint_and_resumes_on_a_new_one(
    nodes, tmp_path, monkeypatch
):
    settings = {**QUICK, "protocol.rounds": 4, "output.checkpoint_every": 1}
    undisturbed = serial("scenarios/quickstart.toml", settings)
    out = tmp_path / "run"
    remove_before_round(nodes, monkeypatch, round_=3, count=len(nodes.workers))

    with pytest.raises(ExecutorLost, match="--resume"):
        mecsim.run("scenarios/quickstart.toml", {**settings, **on(nodes)}, out=out)
    monkeypatch.undo()
    for _ in range(2):
        nodes.add()  # the new cluster
    resumed = mecsim.run(
        "scenarios/quickstart.toml", {**settings, **on(nodes)}, out=out, resume=True
    )

    assert_same_tables(undisturbed, resumed)
    assert resumed.summary["executor_report"]["lost_workers"] == 0
