"""The quickstart over a local multi-node Ray cluster against the serial executor.

Starts a head with no CPUs and ``--nodes`` one-CPU worker nodes (each its own
raylet, ``ray.cluster_utils.Cluster``), runs the quickstart with
``execution.executor = "ray"`` over them and with the serial executor on one
thread, and prints the client jobs each node ran, both wall times and whether
the events, rounds (wall-clock columns aside) and clients tables are equal.

    python benchmarks/bench_ray_cluster.py --nodes 3
"""

from __future__ import annotations

import argparse
import time

import pandas as pd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--scenario", default="scenarios/quickstart.toml")
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    import mecsim

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(args.nodes):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        started = time.perf_counter()
        serial = mecsim.run(
            args.scenario, {"execution.threads": 1}, executor="serial", write=False, progress=False
        )
        serial_s = time.perf_counter() - started
        settings = {"execution.executor": "ray", "execution.ray_address": cluster.address}
        started = time.perf_counter()
        distributed = mecsim.run(args.scenario, settings, write=False, progress=False)
        ray_s = time.perf_counter() - started
    finally:
        ray.shutdown()
        cluster.shutdown()
    report = distributed.summary["executor_report"]
    for node, jobs in report["jobs_per_node"].items():
        print(f"node {node[:12]}: {jobs} client jobs")
    wall = [c for c in serial.rounds.columns if c.startswith("wall")]
    equal = (
        serial.events.equals(distributed.events)
        and serial.rounds.drop(columns=wall).equals(distributed.rounds.drop(columns=wall))
        and serial.clients.equals(distributed.clients)
    )
    pd.testing.assert_frame_equal(serial.events, distributed.events)
    print(
        f"serial (1 thread) {serial_s:.1f} s, ray over {args.nodes} nodes {ray_s:.1f} s "
        f"(ray / serial {ray_s / serial_s:.2f}x, actor start-up included)"
    )
    print(f"tables equal to the serial run's: {equal}")


if __name__ == "__main__":
    main()
