"""Moving clients at scale: 10,000 clients in 7 cells, 10 rounds, cost-only.

Each measurement is a whole process: ``mecsim.run`` of a cost-only FedAvg
scenario (``steps = 5``, 100 samples per client, compute-and-wait rounds) with
N clients over 7 hexagonal cells 600 m apart (reuse 1: every transmission
interferes with every other cell's), a fraction of them drawn each round. The
same scenario runs with clients static and moving (random waypoint at
vehicular speeds, 10-20 m/s: positions every coherence block, handovers with
their breaks), side by side; it prints both wall times, their ratio, the
simulated time and the handovers.

    python benchmarks/bench_mobility.py                      # 10,000 clients, 10% a round
    python benchmarks/bench_mobility.py --clients 2000 --participation 1.0 --rounds 2

The issue-33 target is the first line: 10,000 moving clients, 10 rounds, under a
minute on the 2-core CI machine.
"""

from __future__ import annotations

import argparse
import json

from _child import run_child

CELLS = [(0, 0), (600, 0), (-600, 0), (300, 520), (-300, 520), (300, -520), (-300, -520)]

CHILD = """
import json, sys, time
import mecsim
clients, rounds, part, model = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
cells = json.loads(sys.argv[5])
scenario = {
    "name": "bench-mobility", "seed": 0,
    "data": {"dataset": "digits"}, "model": {"name": "cnn-small"},
    "algorithm": {"name": "fedavg", "steps": 5},
    "protocol": {"kind": "compute_and_wait", "rounds": rounds, "participation": part},
    "network": {"cells": [{"x_m": x, "y_m": y} for x, y in cells]},
    "clients": {"count": clients, "num_samples": 100,
                "x_m": {"dist": "uniform", "low": -800, "high": 800},
                "y_m": {"dist": "uniform", "low": -700, "high": 700},
                "mobility": {"model": model, "speed_mps": [10, 20]}},
    "execution": {"cost_only": True},
    "output": {"progress": False},
}
started = time.perf_counter()
result = mecsim.run(scenario, write=False)
e = result.events
print(json.dumps({"run_s": time.perf_counter() - started, "sim_s": float(e["t_end"].max()),
                  "handovers": int((e["phase"] == "handover").sum()), "rows": len(e)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--participation", type=float, default=0.1)
    args = parser.parse_args()
    common = (str(args.clients), str(args.rounds), str(args.participation))
    static = run_child(CHILD, *common, "static", json.dumps(CELLS))
    moving = run_child(CHILD, *common, "random_waypoint", json.dumps(CELLS))
    print(f"{args.clients} clients, 7 cells, {args.rounds} rounds, "
          f"{args.participation:g} of them a round, cost-only")  # fmt: skip
    print(f"{'':>8} {'wall s':>8} {'process s':>10} {'simulated s':>12} {'handovers':>10}")
    for name, f in (("static", static), ("moving", moving)):
        print(f"{name:>8} {f['run_s']:>8.1f} {f['process_s']:>10.1f} {f['sim_s']:>12.2f} "
              f"{f['handovers']:>10}")  # fmt: skip
    print(
        f"moving / static wall time: {moving['run_s'] / static['run_s']:.2f}x; "
        f"moving run under a minute: {'yes' if moving['process_s'] < 60 else 'no'}"
    )


if __name__ == "__main__":
    main()
